# Tusk — the two commands that matter:
#   make demo   a local cluster, Tusk installed in it, a sample Database
#   make test   everything: format, lints, unit and component tests, then the
#               end-to-end suite on the local cluster (brought up when needed)

SHELL := /bin/bash
export TUSK_CACHE ?= $(HOME)/.cache/tusk
export TUSK_CLUSTER_DIR ?= $(HOME)/.local/state/tusk/cluster
# The cargo target dir lives outside the clone so a fresh clone builds warm.
export CARGO_TARGET_DIR ?= $(TUSK_CACHE)/target
# CI builds each revision once: incremental state would only fill the disk.
ifdef CI
export CARGO_INCREMENTAL := 0
endif
KUBECONFIG_LOCAL := $(TUSK_CLUSTER_DIR)/kubeconfig

.PHONY: test check unit tools generate crds cluster-up cluster-down images e2e demo bench

test: check unit e2e

## Formatting, lints, and the committed CRDs match the code; the local
## cluster's CSI driver (e2e/csi-loop) vets and passes its unit tests.
check:
	cargo fmt --all -- --check
	cargo fmt --all --manifest-path e2e/Cargo.toml -- --check
	cargo clippy --all-targets --locked -- -D warnings
	cargo clippy --all-targets --locked --manifest-path e2e/Cargo.toml -- -D warnings
	cd e2e/csi-loop && go vet . && go test .

## Unit and component tests (no cluster; real PostgreSQL 15 and 17 on loopback,
## real helm, operator-sdk, promtool and an S3 server, versitygw).
unit: tools
	scripts/install-test-deps
	cargo test --locked

## Build (once, cached under $(TUSK_CACHE)/tools) the tools the tests drive.
tools:
	scripts/install-tools helm operator-sdk promtool prometheus versitygw

## Regenerate everything generated: the CRDs from the Rust types; config/
## and the chart's files from helm/tusk; the OLM bundle from both and
## config/manifests. A test fails when any of it is stale.
generate:
	cargo run --locked --quiet --bin tusk-manifests -- --helm "$$(scripts/install-tools --path helm)"

crds: generate

cluster-up:
	e2e/cluster up

cluster-down:
	e2e/cluster down

## The end-to-end suite against $$KUBECONFIG, or the local cluster (started if needed),
## with the tools it drives (helm; opm and OLM for the bundle's install). A test
## that cannot run where $$KUBECONFIG points fails and says why; on another
## cluster, TUSK_E2E_ALLOW_SKIP=node-faults lets the failover tests that act on
## the node skip (each skip is printed, and counted by .ci/run). Under CI the
## local cluster starts empty: whatever an earlier run on the machine left in
## it (an interrupted bench's Databases) would load the API server under test.
e2e:
	@if [[ -z "$${KUBECONFIG:-}" ]]; then \
		if [[ -n "$${CI:-}" ]]; then e2e/cluster down; fi; \
		e2e/cluster up && e2e/images/build-all && e2e/images/load $(TUSK_CLUSTER_DIR)/containerd/containerd.sock; \
	fi
	scripts/install-tools helm opm olm prometheus jaeger krew >/dev/null
	KUBECONFIG=$${KUBECONFIG:-$(KUBECONFIG_LOCAL)} \
	TUSK_IMAGE_ID=$${TUSK_IMAGE_ID:-$$(tar -xOf $(TUSK_CACHE)/images/tusk.tar manifest.json 2>/dev/null | jq -r '.[0].Config' 2>/dev/null)} \
		e2e/suite --test-threads=4

demo:
	e2e/demo
