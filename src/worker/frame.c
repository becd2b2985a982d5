/* frame.c - the judge's result frame (see frame.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/frame.h"

static const char HEAD[8] = {'K', 'G', 'Y', 'M', 'R', 'E', 'S', '1'};
static const char TAIL[8] = {'K', 'G', 'Y', 'M', 'E', 'N', 'D', '1'};

json_t *kg_frame_parse(const char *buf, size_t n, kg_err *err)
{
    if (n < 24) {
        kg_errf(err, KG_EPARSE, "incomplete result frame (%zu bytes)", n);
        return NULL;
    }
    if (memcmp(buf, HEAD, 8)) {
        kg_errf(err, KG_EPARSE, "result frame has a bad header");
        return NULL;
    }
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
        len = len << 8 | (unsigned char)buf[8 + i];
    if (len > KG_FRAME_MAX || len != n - 24) {
        kg_errf(err, KG_EPARSE, "result frame length %llu does not match %zu bytes received",
                (unsigned long long)len, n);
        return NULL;
    }
    if (memcmp(buf + 16 + len, TAIL, 8)) {
        kg_errf(err, KG_EPARSE, "result frame has no trailer");
        return NULL;
    }
    json_error_t je;
    json_t *obj = json_loadb(buf + 16, (size_t)len, JSON_REJECT_DUPLICATES, &je);
    if (!obj) {
        kg_errf(err, KG_EPARSE, "result frame holds invalid JSON: %s", je.text);
        return NULL;
    }
    if (!json_is_object(obj)) {
        json_decref(obj);
        kg_errf(err, KG_EPARSE, "result frame does not hold a JSON object");
        return NULL;
    }
    return obj;
}

static const char NOTE[8] = {'K', 'G', 'Y', 'M', 'N', 'O', 'T', 'E'};

int kg_note_take(const char *buf, size_t n, json_t **note, size_t *used,
                 kg_err *err)
{
    *note = NULL;
    *used = 0;
    if (n < 8 ? memcmp(buf, NOTE, n) != 0 : memcmp(buf, NOTE, 8) != 0)
        return 0; /* a frame, or nothing yet */
    if (n < 16)
        return 0;
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
        len = len << 8 | (unsigned char)buf[8 + i];
    if (len > KG_NOTE_MAX) {
        kg_errf(err, KG_EPARSE, "note of %llu bytes is too large",
                (unsigned long long)len);
        return -1;
    }
    if (n < 16 + len)
        return 0;
    json_error_t je;
    json_t *obj = json_loadb(buf + 16, (size_t)len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(obj)) {
        json_decref(obj);
        kg_errf(err, KG_EPARSE, "note is not a JSON object");
        return -1;
    }
    *note = obj;
    *used = 16 + (size_t)len;
    return 1;
}

int kg_frame_encode(const json_t *obj, char **out, size_t *n, kg_err *err)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    if (!s)
        return kg_errf(err, KG_ENOMEM, "cannot encode result");
    size_t len = strlen(s);
    char *b = malloc(len + 24);
    if (!b) {
        free(s);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    memcpy(b, HEAD, 8);
    for (int i = 0; i < 8; i++)
        b[8 + i] = (char)((uint64_t)len >> (56 - 8 * i));
    memcpy(b + 16, s, len);
    memcpy(b + 16 + len, TAIL, 8);
    free(s);
    *out = b;
    *n = len + 24;
    return 0;
}
