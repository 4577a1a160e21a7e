"""Engine-agnostic A/B orchestration: one subprocess per engine run, compared afterwards."""
