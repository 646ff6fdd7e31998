"""Models and decoding: presets, tokens, batching, prompts, sampling, the guard, selection and the rewriter."""
