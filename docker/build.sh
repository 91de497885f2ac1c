#!/usr/bin/env bash
# Build an mtb image with its provenance stamped into labels and environment.
#
#   docker/build.sh [gpu|gpu-deepspeed|megatron] [TAG]
#
# The image records the git revision it was built from (refused from a tree
# with uncommitted changes unless ALLOW_DIRTY=1, which marks it "-dirty"),
# the build time, and its base image pinned by digest (BASE_IMAGE overrides
# the Dockerfile's, and must carry @sha256:...). http_proxy/https_proxy (and
# their upper-case forms) reach the build only as BuildKit secrets.
set -euo pipefail

target="${1:-gpu}"
case "$target" in
    gpu | gpu-deepspeed) base_arg=GPU_BASE ;;
    megatron) base_arg=MEGATRON_BASE ;;
    *)
        echo "docker/build.sh: target must be gpu, gpu-deepspeed or megatron (got '$target')" >&2
        exit 2
        ;;
esac
root="$(cd "$(dirname "$0")/.." && pwd)"
tag="${2:-mtb:$target}"

revision="$(git -C "$root" rev-parse HEAD)"
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
    if [ "${ALLOW_DIRTY:-0}" != 1 ]; then
        echo "docker/build.sh: the working tree has uncommitted changes; commit them" \
            "(or set ALLOW_DIRTY=1: the image's revision is then marked -dirty)" >&2
        exit 2
    fi
    revision="${revision}-dirty"
fi

base="${BASE_IMAGE:-$(sed -n "s/^ARG ${base_arg}=//p" "$root/docker/Dockerfile")}"
digest="${base##*@}"
if [ "$digest" = "$base" ] || [[ "$digest" != sha256:* ]]; then
    echo "docker/build.sh: the base image '$base' is not pinned by digest (NAME@sha256:...)" >&2
    exit 2
fi

secrets=()
for id in http_proxy https_proxy; do
    for variable in "$id" "${id^^}"; do
        if [ -n "${!variable:-}" ]; then
            secrets+=(--secret "id=${id},env=${variable}")
            break
        fi
    done
done

exec docker buildx build \
    --file "$root/docker/Dockerfile" \
    --target "$target" \
    --build-arg "${base_arg}=${base}" \
    --build-arg "MTB_BASE_DIGEST=${digest}" \
    --build-arg "MTB_REVISION=${revision}" \
    --build-arg "MTB_CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --build-arg "MTB_IMAGE_NAME=${tag}" \
    "${secrets[@]}" \
    --tag "$tag" \
    --load \
    "$root"
