// Wrapper module: builds the helm v3 client.
module sluice.dev/kube-build/helm

go 1.26.0

require helm.sh/helm/v3 v3.22.0
