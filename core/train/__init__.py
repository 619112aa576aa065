"""ember.train: the training loop (fit, Trainer), checkpoints that resume mid-epoch, mixed precision with
float32 master weights, and a progress bar. Gradient clipping and parameter vectors live in ember.nn.utils,
learning-rate schedules in ember.optim."""
from .checkpoint import load_checkpoint, save_checkpoint
from .mixed_precision import MixedPrecision
from .progress import progress_bar
from .trainer import Trainer, classification_loss, fit, format_epoch

__all__ = ["MixedPrecision", "Trainer", "classification_loss", "fit", "format_epoch", "load_checkpoint",
           "progress_bar", "save_checkpoint"]
