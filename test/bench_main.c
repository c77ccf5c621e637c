/* make bench: runs every benchmark (test/bench_*.c), or those named on the
 * command line.  Each prints "name: value unit" lines; BENCHMARKS.md
 * records them with the machine they ran on. */
#include <stdio.h>
#include <string.h>

extern const struct {
    const char *name;
    void (*fn)(void);
} tb_benches[];

int main(int argc, char **argv)
{
    int ran = 0;
    for (int i = 0; tb_benches[i].name; i++) {
        int want = argc < 2;
        for (int a = 1; a < argc; a++)
            if (strcmp(argv[a], tb_benches[i].name) == 0)
                want = 1;
        if (!want)
            continue;
        printf("== %s\n", tb_benches[i].name);
        fflush(stdout);
        tb_benches[i].fn();
        fflush(stdout);
        ran++;
    }
    if (!ran)
        fprintf(stderr, "bench: nothing to run\n");
    return ran ? 0 : 2;
}
