/*
 * frame.h - the result frame a judge writes to the worker's result pipe.
 *
 *   "KGYMRES1" | 8-byte big-endian length L | L bytes of UTF-8 JSON | "KGYMEND1"
 *
 * The worker accepts a result only when the whole frame arrived: a missing
 * trailer, a wrong length, trailing bytes or JSON that is not an object
 * mean the judge did not finish, and the result is never a pass.
 *
 * Before its frame, a judge whose task says "result_notes" may write notes
 * of what it learnt early (the problem's memory footprint, for admission):
 *
 *   "KGYMNOTE" | 8-byte big-endian length L (at most KG_NOTE_MAX) | L bytes
 *   of a UTF-8 JSON object
 */
#ifndef KGYM_FRAME_H
#define KGYM_FRAME_H

#include <jansson.h>
#include <stddef.h>

#include "kgym/kgym.h"

#define KG_FRAME_MAX (64u << 20) /* a result larger than this is refused */

/*
 * Parses buf[0..n) as exactly one frame. Returns the JSON object (caller
 * owns it) or NULL with a reason in err.
 */
json_t *kg_frame_parse(const char *buf, size_t n, kg_err *err);

#define KG_NOTE_MAX 4096u

/*
 * The note at the front of buf[0..n): 1 with *note (caller owns it) and
 * *used (its bytes), 0 when buf does not begin with a note or holds only
 * part of one yet, -1 with err when it begins with a bad one.
 */
int kg_note_take(const char *buf, size_t n, json_t **note, size_t *used,
                 kg_err *err);

/* Encodes obj as one frame; *out is malloc'd and owned by the caller. */
int kg_frame_encode(const json_t *obj, char **out, size_t *n, kg_err *err);

#endif
