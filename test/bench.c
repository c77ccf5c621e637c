/* make bench: micro and macro benchmarks of the simulator itself.
 * Each section prints "name: value unit" lines; BENCHMARKS.md records them. */
#include <stdio.h>

int main(void)
{
    printf("bench: no sections yet\n");
    return 0;
}
