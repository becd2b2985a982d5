/*
 * json_util.h - moved to lib/json_util.h: libkgym's JSON layer
 * (lib/rl_json.c) reads and writes JSON with it, and includes point down
 * only (docs/design.md). This header forwards for the tools' includes.
 */
#include "../../lib/json_util.h"
