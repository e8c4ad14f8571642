// mapping.h — a file mapped read-only, and its weights in 2 MiB pages.
#ifndef QUILL_MAPPING_H
#define QUILL_MAPPING_H

#include <stddef.h>
#include <stdint.h>

#define HUGE_PAGE ((size_t)2 << 20)  // the pages the weights, the x8 copies and the KV cache ask for

typedef struct {
    const uint8_t *base;  // the whole file, at a 2 MiB-aligned address; NULL when nothing is mapped
    size_t size;
    int fd;               // the file, kept open for map_populate (valid while base is set)
} file_map;

// Maps a regular, non-empty file read-only. On failure returns -1 with err
// set (prefixed by the path) and leaves m zeroed.
int map_open(file_map *m, const char *path, char *err);
void map_close(file_map *m);

// Faults the whole file in now, in 2 MiB pages where the kernel can (see
// mapping.c), for a reader that streams all of it on every step (the CPU's
// decode). *huge: the bytes now mapped in 2 MiB pages, -1 where the kernel
// does not say (no /proc). Returns -1 with err set only when the file could
// not be mapped again (out of memory): m is then unusable but for map_close.
int map_populate(file_map *m, long long *huge, char *err);

// n bytes of anonymous memory no one has touched, zeroed, starting on a 2 MiB
// boundary and asked for in 2 MiB pages (memory from malloc may have been
// touched already, and stays in the 4 KiB pages it then got); NULL when out
// of memory. map_anon_free takes the same n.
void *map_anon(size_t n);
void map_anon_free(void *p, size_t n);

// Drops the whole pages inside [p, p + n) of a file mapping from this
// process (a part of the file now read from a copy); read again, they come
// back from the file. A hint: nothing fails.
void map_drop(const void *p, size_t n);

#endif
