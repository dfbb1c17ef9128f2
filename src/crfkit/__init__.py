"""crfkit: linear-chain conditional random fields, fast to train, easy to use."""
__version__ = "0.1.0"
