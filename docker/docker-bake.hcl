# Builds every FlexInfer image from docker/Dockerfile in one go:
#
#   REGISTRY=ghcr.io/flexinfer TAG=0.1.0 docker buildx bake -f docker/docker-bake.hcl
#   docker buildx bake -f docker/docker-bake.hcl --push          # push as well
#   docker buildx bake -f docker/docker-bake.hcl flexinfer-gateway
#
# TAG should match the chart's appVersion (helm/flexinfer/Chart.yaml), which
# the chart uses as the default image tag.

variable "REGISTRY" {
  default = "ghcr.io/flexinfer"
}

variable "TAG" {
  default = "0.1.0"
}

variable "PLATFORMS" {
  default = "linux/amd64"
}

group "default" {
  targets = [
    "flexinfer-gateway",
    "flexinfer-operator",
    "flexinfer-sched",
    "flexinfer-agent",
    "flexinfer-flashload",
    "flexinfer-bench",
    "flexinfer-sim",
    "flexinfer-conformance",
  ]
}

target "_common" {
  context    = "."
  dockerfile = "docker/Dockerfile"
  platforms  = split(",", PLATFORMS)
}

target "flexinfer-gateway" {
  inherits = ["_common"]
  target   = "flexinfer-gateway"
  tags     = ["${REGISTRY}/flexinfer-gateway:${TAG}"]
}

target "flexinfer-operator" {
  inherits = ["_common"]
  target   = "flexinfer-operator"
  tags     = ["${REGISTRY}/flexinfer-operator:${TAG}"]
}

target "flexinfer-sched" {
  inherits = ["_common"]
  target   = "flexinfer-sched"
  tags     = ["${REGISTRY}/flexinfer-sched:${TAG}"]
}

target "flexinfer-agent" {
  inherits = ["_common"]
  target   = "flexinfer-agent"
  tags     = ["${REGISTRY}/flexinfer-agent:${TAG}"]
}

target "flexinfer-flashload" {
  inherits = ["_common"]
  target   = "flexinfer-flashload"
  tags     = ["${REGISTRY}/flexinfer-flashload:${TAG}"]
}

target "flexinfer-bench" {
  inherits = ["_common"]
  target   = "flexinfer-bench"
  tags     = ["${REGISTRY}/flexinfer-bench:${TAG}"]
}

target "flexinfer-sim" {
  inherits = ["_common"]
  target   = "flexinfer-sim"
  tags     = ["${REGISTRY}/flexinfer-sim:${TAG}"]
}

target "flexinfer-conformance" {
  inherits = ["_common"]
  target   = "flexinfer-conformance"
  tags     = ["${REGISTRY}/flexinfer-conformance:${TAG}"]
}
