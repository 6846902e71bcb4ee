"""Language-model runtime pieces that sit around the GPU graph (tokenizer, ...)."""
