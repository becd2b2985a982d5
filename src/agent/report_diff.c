/* report_diff.c - `kgym report A B`: B - A per level and turn (report.h),
 * for the levels and turns both runs have. */
#include <math.h>

#include "agent/report.h"

static json_t *delta(const json_t *a, const json_t *b)
{
    if (!json_is_number(a) || !json_is_number(b))
        return json_null();
    return json_real(json_number_value(b) - json_number_value(a));
}

static const char *const pmaps[] = {"fast_p", "fast_p_best", "fast_p_correct"};
static const char *const scalars[] = {"hacked_ratio", "mean_reward",
                                      "mean_coverage", "geomean_speedup",
                                      "flat_share"};

static json_t *turn_delta(const json_t *a, const json_t *b)
{
    json_t *d = json_object();
    for (size_t i = 0; i < sizeof pmaps / sizeof *pmaps; i++) {
        json_t *m = json_object();
        for (int j = 0; j < RP_NP; j++)
            json_object_set_new(
                m, rp_pkeys[j],
                delta(
                    json_object_get(json_object_get(a, pmaps[i]), rp_pkeys[j]),
                    json_object_get(json_object_get(b, pmaps[i]),
                                    rp_pkeys[j])));
        json_object_set_new(d, pmaps[i], m);
    }
    for (size_t i = 0; i < sizeof scalars / sizeof *scalars; i++)
        json_object_set_new(d, scalars[i],
                            delta(json_object_get(a, scalars[i]),
                                  json_object_get(b, scalars[i])));
    return d;
}

json_t *rp_diff(const json_t *a, const json_t *b)
{
    json_t *levels = json_object();
    const char *lk, *tk;
    json_t *la, *ta;
    json_object_foreach((json_t *)json_object_get(a, "levels"), lk, la)
    {
        json_t *lb = json_object_get(json_object_get(b, "levels"), lk);
        if (!lb)
            continue;
        json_t *turns = json_object();
        json_object_foreach(json_object_get(la, "turns"), tk, ta)
        {
            json_t *tb = json_object_get(json_object_get(lb, "turns"), tk);
            if (tb)
                json_object_set_new(turns, tk, turn_delta(ta, tb));
        }
        json_object_set_new(levels, lk, json_pack("{s:o}", "turns", turns));
    }
    return json_pack("{s:O, s:O, s:O, s:o}", "a", json_object_get(a, "name"),
                     "b", json_object_get(b, "name"), "comparison",
                     json_object_get(a, "comparison"), "levels", levels);
}
