"""A small CNN for scikit-learn's 8x8 handwritten digits: the model, its data split and its training
recipe, shared by examples/train_digits_cnn.py, the page's training tool (wasm/tools/train.py), the tests
and bench/bench_train.py, so all of them train the same thing."""
from .model import DigitsCNN, init_weights  # noqa: F401
from .recipe import TrainConfig, digits_loaders, make_trainer, predict, train  # noqa: F401
