#!/bin/sh
# model-init (compose.yaml): make sure /models/$MODEL_FILE is there and is the file whose
# SHA-256 is $MODEL_SHA256 (both from deploy/model/gorilla.env). Downloads it when missing
# (resuming a partial download), never starts llama-server on a file it could not verify.
# Runs in the llama.cpp server image, which has sh, curl and sha256sum.
set -eu

: "${MODEL_FILE:?MODEL_FILE is not set (deploy/model/gorilla.env)}"
: "${MODEL_URL:?MODEL_URL is not set (deploy/model/gorilla.env)}"
expected=$(printf '%s' "${MODEL_SHA256:-}" | tr 'A-F' 'a-f')
dir=${MODEL_DIR:-/models}
dest="$dir/$MODEL_FILE"
part="$dest.part"
stamp="$dest.sha256"

say() { echo "model-init: $*" >&2; }
sha() { sha256sum "$1" | cut -d ' ' -f 1; }

if [ -n "$expected" ] && ! printf '%s' "$expected" | grep -Eq '^[0-9a-f]{64}$'; then
  say "MODEL_SHA256 in deploy/model/gorilla.env is not 64 hex digits: '$MODEL_SHA256'"
  exit 1
fi

# A file verified before: its stamp holds the checksum it was verified against.
if [ -s "$dest" ] && [ -n "$expected" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$expected" ]; then
  say "$dest is there and was verified (sha256 $expected)"
  exit 0
fi

if [ -s "$dest" ]; then
  got=$(sha "$dest")
  if [ -z "$expected" ]; then
    say "$dest is there; its sha256 is $got, but MODEL_SHA256 is empty in deploy/model/gorilla.env."
    say "Check that value against Hugging Face (see the comment in gorilla.env), write it there, and start again."
    exit 1
  fi
  if [ "$got" != "$expected" ]; then
    say "$dest has sha256 $got, want $expected: remove it (docker compose down -v drops the volume) to download again"
    exit 1
  fi
  printf '%s' "$expected" > "$stamp"
  say "$dest verified (sha256 $got)"
  exit 0
fi

mkdir -p "$dir"
# $part is a download in progress (resumed where it stopped); $unverified a complete download
# whose checksum could not be checked yet because MODEL_SHA256 was empty.
unverified="$dest.unverified"
if [ ! -s "$unverified" ]; then
  say "downloading $MODEL_URL to $part"
  set -- -fL --retry 5 --retry-delay 10 --continue-at - --output "$part"
  if [ -n "${HF_TOKEN:-}" ]; then
    set -- "$@" --header "Authorization: Bearer $HF_TOKEN"
  fi
  curl "$@" "$MODEL_URL"
  mv "$part" "$unverified"
fi

got=$(sha "$unverified")
if [ -z "$expected" ]; then
  say "downloaded $unverified; its sha256 is $got, but MODEL_SHA256 is empty in deploy/model/gorilla.env."
  say "Check that value against Hugging Face (see the comment in gorilla.env), write it there, and start again:"
  say "the download is kept and will not be fetched again."
  exit 1
fi
if [ "$got" != "$expected" ]; then
  rm -f "$unverified"
  say "downloaded file has sha256 $got, want $expected: removed it; check MODEL_URL and MODEL_SHA256"
  exit 1
fi
mv "$unverified" "$dest"
printf '%s' "$expected" > "$stamp"
say "$dest downloaded and verified (sha256 $got)"
