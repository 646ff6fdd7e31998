"""A model's life in training: made ready, fine-tuned, stepped and measured, then exported."""
