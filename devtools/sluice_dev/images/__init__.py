"""Container images from the project's Dockerfiles, built with buildah on a locally made Debian base.

``build`` (``sluice-dev images build``, ``make images``) makes the OCI archives, cached by content;
``load_into_containerd`` hands one to a node's containerd; ``bundle`` runs a command inside an
archive with runc (smoke tests). See docs/images.md.
"""
