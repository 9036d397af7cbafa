"""Zipformer encoder (Yao et al., ICLR 2024): scaling, attention, block, stack, front end, encoder, streaming caches."""
