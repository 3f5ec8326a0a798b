// The node's tiny local images: the pod sandbox ("pause") and a test server for the real-node
// tests. Standard library only; built static (CGO_ENABLED=0) and packed into OCI archives by
// sluice_dev.platform.node.images.
module sluice.dev/node-images

go 1.26.0
