#!/bin/sh
# Runs rocmforge on the default model, stories260K.gguf: $ROCMFORGE_MODEL if set, else
# ../shared/models (or $ROCMFORGE_SHARED/models), else a copy downloaded once into
# ~/.cache/rocmforge with a progress bar.
set -e
url="https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf"
model="${ROCMFORGE_MODEL:-}"
if [ -z "$model" ]; then
    shared="${ROCMFORGE_SHARED:-../shared}"
    if [ -f "$shared/models/stories260K.gguf" ]; then
        model="$shared/models/stories260K.gguf"
    else
        model="${XDG_CACHE_HOME:-$HOME/.cache}/rocmforge/stories260K.gguf"
        if [ ! -f "$model" ]; then
            mkdir -p "$(dirname "$model")"
            echo "downloading $url" >&2
            curl -fL --progress-bar -o "$model.part" "$url"
            mv "$model.part" "$model"
        fi
    fi
fi
exec ./build/rocmforge run -m "$model" -p "Once upon a time" -n 200 --temp 0 "$@"
