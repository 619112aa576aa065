"""ember.data: datasets, a DataLoader with torch.utils.data's semantics, and readers for the common
training-data formats (IDX, CIFAR binary batches, image folders, CSV/NPZ tables, token blocks,
chat JSONL with assistant-only labels).

    from ember.data import DataLoader, TensorDataset, random_split
    train, test = random_split(TensorDataset(x, y), [0.8, 0.2], seed=0)
    for xb, yb in DataLoader(train, batch_size=32, shuffle=True, seed=0):
        ...

Everything runs in Pyodide too (no threads); a seeded shuffle gives the same order in both.
"""
from .bundled import load_digits, load_iris, sklearn_data_file
from .chat import ChatDataError, ChatExamples, parse_chat_jsonl, read_chat_jsonl
from .cifar import CIFARDataset, read_cifar, read_cifar100_coarse
from .collate import default_collate, numpy_collate
from .dataset import (ConcatDataset, Dataset, IterableDataset, MapDataset, Subset, TensorDataset,
                      random_split)
from .idx import IDXDataset, read_idx, write_idx
from .image_folder import ImageFolder, decode_image
from .loader import DataLoader
from .sampling import RandomSampler, SequentialSampler, permutation
from .tables import TableDataset, read_csv, read_npz
from .text import TokenBlocks, TokenStream, encode_text, read_text
from . import transforms

__all__ = ["CIFARDataset", "ChatDataError", "ChatExamples", "ConcatDataset", "DataLoader", "Dataset", "IDXDataset",
           "ImageFolder", "IterableDataset", "MapDataset", "RandomSampler", "SequentialSampler", "Subset",
           "TableDataset", "TensorDataset", "TokenBlocks", "TokenStream", "decode_image", "default_collate",
           "encode_text", "load_digits", "load_iris", "numpy_collate", "parse_chat_jsonl", "permutation",
           "random_split", "read_cifar", "read_chat_jsonl", "read_cifar100_coarse", "read_csv", "read_idx",
           "read_npz", "read_text", "sklearn_data_file", "transforms", "write_idx"]
