#!/bin/sh
# Checks that dependencies run one way: no file includes a file of a
# higher layer.  Usage: sh scripts/check_layers.sh [ROOT] (ROOT: the
# repository, by default the one holding this script).  Every .c and .h
# file under ROOT must belong to a layer below; a file that matches none
# fails the check, so a new file has to be placed here.  Prints one line
# per offending include (file:line, the include, both layers) and exits 1;
# prints nothing and exits 0 when the tree is layered.
#
# The layers, lowest first.  A file may include files of its own layer and
# of lower ones; test/ may include anything.
#   1 base        emu/status, emu/rfile, emu/out/outfile, emu/fdio: errors,
#                 reading and writing whole files and buffers; everything
#                 else uses them.
#   2 hardware    mxu/, hbm/, interconnect/: the unit models, which know
#                 nothing of graphs or firmware.
#   3 model       emu/params, emu/graph, emu/trace, emu/plan, emu/result,
#                 firmware/isa: the values the stages pass each other.
#                 The instruction set is here, not with the compiler: the
#                 cost model, the engine and the writers all read
#                 instructions, and none of them lowers anything.
#                 emu/imp/ (other tools' model files read into a trace)
#                 is here too: it needs only the trace reader below it.
#   4 cost        emu/cost: one instruction's price on its unit.
#   5 compiler    firmware/ (but isa): graph + plan -> one core's program.
#                 It is handed its pricer (fw_pricer) rather than calling
#                 the engine, which executes the compiler's output.
#   6 execution   emu/engine, emu/fx/: run programs for time and values.
#   7 pipeline    emu/sim, emu/range, emu/report: a step end to end, its
#                 range over the unconfirmed assumptions, and its report.
#   8 writers     emu/out/ (but outfile): charts, traces, arrays made from
#                 a finished result; nothing below calls them.
#   9 front ends  emu/cli/, emu/view/: commands and the viewer.
#  10 test        test/.
# A module cut into files keeps its prefix (emu/report_x.c is pipeline).

root=${1:-$(dirname "$0")/..}
cd "$root" || exit 2

# The layer of a path: "N name", or nothing when the path has no layer.
layer_of() {
    case $1 in
    emu/status*.[ch] | emu/rfile*.[ch] | emu/out/outfile*.[ch] | emu/fdio*.[ch])
        echo "1 base" ;;
    mxu/*.[ch] | hbm/*.[ch] | interconnect/*.[ch])
        echo "2 hardware" ;;
    emu/params*.[ch] | emu/graph*.[ch] | emu/trace*.[ch] | emu/plan*.[ch] | \
        emu/result*.[ch] | firmware/isa*.[ch] | emu/imp/*.[ch])
        echo "3 model" ;;
    emu/cost*.[ch])
        echo "4 cost" ;;
    firmware/*.[ch])
        echo "5 compiler" ;;
    emu/engine*.[ch] | emu/fx/*.[ch])
        echo "6 execution" ;;
    emu/sim*.[ch] | emu/report*.[ch] | emu/range*.[ch])
        echo "7 pipeline" ;;
    emu/out/*.[ch])
        echo "8 writers" ;;
    emu/cli/*.[ch] | emu/view/*.[ch])
        echo "9 front ends" ;;
    test/*)
        echo "10 test" ;;
    esac
}

# Every source file but build trees and hidden directories.
files=$(find . \( -path './build*' -o -path './out' -o -path './.*' \) -prune \
    -o -type f \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort)

bad=0
for f in $files; do
    fl=$(layer_of "$f")
    if [ -z "$fl" ]; then
        echo "$f: in no layer (place it in scripts/check_layers.sh)"
        bad=1
        continue
    fi
    fn=${fl%% *}
    # "LINE:INCLUDED" for every #include "..." line
    lines=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/')
    for li in $lines; do
        ln=${li%%:*}
        inc=${li#*:}
        il=$(layer_of "$inc")
        if [ -z "$il" ]; then
            echo "$f:$ln: includes \"$inc\", which is in no layer"
            bad=1
            continue
        fi
        if [ "${il%% *}" -gt "$fn" ]; then
            why="layer ${fl#* } ($fn) includes higher layer"
            echo "$f:$ln: includes \"$inc\": $why ${il#* } (${il%% *})"
            bad=1
        fi
    done
done
exit $bad
