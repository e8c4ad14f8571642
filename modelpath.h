// modelpath.h — the models a user already has: `-m NAME` and `quill list`.
//
// -m takes a path or a name. A value that names an existing file (not a
// folder) is that file. Otherwise it is looked up as a name in these places,
// in this order; the first place where anything matches decides:
//   1. $QUILL_MODELS: folders separated by ':', searched for *.gguf down to 4
//      levels of subfolders (names starting with '.' skipped)
//   2. the Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
//      $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub:
//      models--ORG--NAME/snapshots/REV/**.gguf (links to blobs/ are followed;
//      of a file in several revisions, the one refs/main names, else the newest)
//   3. llama.cpp's cache: $LLAMA_CACHE, else $XDG_CACHE_HOME/llama.cpp, else
//      ~/.cache/llama.cpp: the *.gguf in it, and manifest=ORG=NAME=TAG.json
//      naming the file `-hf ORG/NAME:TAG` downloaded (ORG_NAME_FILE.gguf)
//   4. ollama's store: $OLLAMA_MODELS, else ~/.ollama/models: a manifest
//      manifests/HOST/NS/NAME/TAG whose layer of mediaType
//      application/vnd.ollama.image.model is blobs/sha256-HEX
//   5. LM Studio: ~/.lmstudio/models, then ~/.cache/lm-studio/models
//      (PUBLISHER/REPO/*.gguf)
//
// The names a file answers to (compared ignoring ASCII case):
//   - its file name, with or without .gguf ("llama-2-7b.Q4_K_M"), in every place;
//     in $QUILL_MODELS also its path below the folder ("sub/foo")
//   - Hugging Face and LM Studio: ORG/NAME and NAME (every GGUF of the repository
//     but mmproj-* files), ORG/NAME:QUANT and NAME:QUANT (those whose file name
//     without .gguf ends in -QUANT or .QUANT: "Llama-2-7B-GGUF:Q4_K_M"), and
//     ORG/NAME/FILE (FILE: its path in the repository, .gguf optional)
//   - llama.cpp's manifests: ORG/NAME:TAG and NAME:TAG, and ORG/NAME and NAME
//     for the tag "latest"
//   - ollama: NAME:TAG, NS/NAME:TAG and HOST/NS/NAME:TAG; with no :TAG, the tag
//     is "latest" ("llama3" = "registry.ollama.ai/library/llama3:latest")
// One file seen twice in a place (a folder given twice, a link) counts once.
//
// Several matches in the deciding place: an error whose first line says so and
// whose next lines give each candidate, a name that picks exactly it and its
// path. No match: a value that looks like a path (starts with '/', '.' or '~',
// or ends in .gguf) or names a folder comes back unchanged, so that opening it
// reports the usual error ("cannot open", "is a directory"); any other value
// is an error naming every place looked in, those that do not exist marked
// (absent), $QUILL_MODELS (unset) when it is.
#ifndef QUILL_MODELPATH_H
#define QUILL_MODELPATH_H

#include <limits.h>
#include <stdio.h>

#define MP_PATH_MAX PATH_MAX  // size of the path buffer mp_resolve fills

// Returns 0 with path set to the file to open for -m's value, or -1 with *msg
// (malloc'd, without a "quill: " prefix, control bytes shown as '?') saying
// why: one line, or for an ambiguous name a first line and one line per
// candidate. *msg is NULL when there was no memory even for the message.
int mp_resolve(const char *value, char path[MP_PATH_MAX], char **msg);

// Prints every model found in the places above, one line each (NAME SIZE ARCH
// TYPE SOURCE PATH under a header; json: one JSON object per line with name,
// path, source, size, architecture, type, and error for a file that does not
// parse, which is listed with its error instead of its header's figures).
// NAME is the shortest name that -m resolves to exactly that file (its path
// when no name does). Sorted by name, then place, then path. Returns the
// number listed; with none, *msg (malloc'd) says where it looked. -1 with
// *msg when out of memory.
int mp_list(FILE *out, int json, char **msg);

#endif
