"""Lives on the image's own PYTHONPATH (/opt/image-site): tests import it to prove the
image's PYTHONPATH survives rocmenv's launcher being prepended."""

MARKER = "image-site"
