"""``fk check``: plugin kernels against each engine's own kernel, op by op, on captured shapes."""
