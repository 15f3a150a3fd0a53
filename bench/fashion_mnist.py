"""Fashion-MNIST's training set as exec/data.cpp holds it, for the benches' PyTorch sides:
images as floats in [0, 1], one row of 784 per sample, and labels as int64. The files are
Debian's (fashion-mnist), or PARALLAX_FASHION_MNIST's folder."""
import gzip
import os
import struct

import torch

FASHION = os.environ.get("PARALLAX_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def training_set():
    images = read_idx(FASHION + "/train-images-idx3-ubyte.gz").reshape(-1, 784).float().div_(255.0)
    labels = read_idx(FASHION + "/train-labels-idx1-ubyte.gz").long()
    return images, labels
