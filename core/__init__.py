"""ember: a small PyTorch-like tensor library (placeholder until the core lands)."""
__version__ = "0.1.0"
