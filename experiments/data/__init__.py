"""The data a worker trains on: datasets (digits, synthetic, Fashion-MNIST from its idx files
through fashion_mnist, CIFAR-10 through cifar10, which alone imports torchvision) and the
partition of the training set over the workers."""
