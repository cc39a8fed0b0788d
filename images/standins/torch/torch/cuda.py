"""``torch.cuda`` stand-in: the test images have no GPU."""


def is_available():
    return False


def device_count():
    return 0
