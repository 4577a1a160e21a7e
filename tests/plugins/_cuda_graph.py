"""What the plugin tests share: cloning a slot's arguments, and a kernel captured once in a CUDA graph and
replayed on new data."""
import torch


def clone_args(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def capture_and_replay(slot, fn, case):
    """``fn`` captured in a CUDA graph on seeded inputs of ``case`` (after one warm-up call on a side stream, so
    compiling or reading clocks happens outside the capture), then replayed on fresh inputs copied into the
    captured tensors. Returns (graph, got, want): what the replay left (the tensor arguments of an in-place
    slot, else the return value) and the slot's reference on the fresh inputs, in the same form."""
    static = slot.make_inputs(case, torch.float32, "cuda", torch.Generator().manual_seed(0))
    tensors = [i for i, a in enumerate(static) if isinstance(a, torch.Tensor)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*clone_args(static))
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static)
    fresh = slot.make_inputs(case, torch.float32, "cuda", torch.Generator().manual_seed(1))
    for i in tensors:
        static[i].copy_(fresh[i])
    graph.replay()
    torch.cuda.synchronize()
    ref_args = clone_args(fresh)
    ref_out = slot.reference(*ref_args)
    if slot.in_place:
        return graph, tuple(static[i] for i in tensors), tuple(ref_args[i] for i in tensors)
    return graph, (out,), (ref_out,)
