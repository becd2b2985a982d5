/* code_file.h - a code file given to a command, read without trusting it
 * (code_file.c); used by the CLI's commands and the agent's problem sets. */
#ifndef KGYM_CODE_FILE_H
#define KGYM_CODE_FILE_H

#include <stddef.h>

#include "kgym/kgym.h"

/*
 * A code file given to a command, for the request field `field`
 * ("kernel_code" or "reference_code"), read without trusting it: opened
 * non-blocking (a FIFO cannot hang the command) and refused unless it is a
 * regular file (not a FIFO, device, directory or socket); its size checked
 * against the field's limit (KG_MAX_KERNEL_CODE, KG_MAX_REFERENCE_CODE)
 * before reading, and at most limit + 1 bytes read (a file that grows is
 * caught); refused when empty, when it holds a NUL byte or when it is not
 * strict UTF-8 (no overlong forms, surrogates or code points above
 * U+10FFFF), the message giving the byte offset. Returns the text,
 * NUL-terminated, with its length in *len (caller frees), or NULL with
 * "PATH: reason" in err.
 */
char *kg_read_code_file(const char *path, const char *field, size_t *len,
                       kg_err *err);

#endif
