"""Models: presets, fine-tuning, batching, sampling, the guard, prompts, selection and the rewriter."""
