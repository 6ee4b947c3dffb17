# Build targets. `make image VERSION=v1.11.1` builds a signed node image in _out/.
OUT ?= _out

.PHONY: image imager
image:
	VERSION=$(VERSION) OUT=$(OUT) ./hack/image.sh

imager:
	go build -o $(OUT)/imager ./cmd/imager
