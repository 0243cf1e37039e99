def generate(seed, opts, rng):
    raise NotImplementedError
