"""The data a worker trains on: datasets (digits, synthetic, CIFAR-10 through cifar10, which
alone imports torchvision) and the partition of the training set over the workers."""
