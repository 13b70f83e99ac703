/* A stand-in for an instrumentation agent loaded with LD_PRELOAD (a tracer, a profiler, a
 * security sensor). Its constructor runs in every dynamically linked process of the container
 * before main(). With AGENT_MODE=crash it behaves as a faulty agent does: it takes the app down
 * at start. With AGENT_LOG=debug it says what it does, as an agent's debug logging would.
 *
 * Build: cc -shared -fPIC -o libagent.so agent.c   (the pod's init container does it) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void agent_start(void) {
    const char *mode = getenv("AGENT_MODE");
    const char *log = getenv("AGENT_LOG");
    int debug = log != NULL && strcmp(log, "debug") == 0;
    if (debug) {
        fprintf(stderr, "agent: loaded into pid %d (mode %s)\n", (int)getpid(),
                mode ? mode : "normal");
    }
    if (mode != NULL && strcmp(mode, "crash") == 0) {
        if (debug) {
            fprintf(stderr, "agent: hooking malloc failed: corrupting the heap\n");
        }
        fflush(stderr);
        /* What a broken agent does to its host process: a real fault, which takes down even
         * a container's PID 1 (a signal it merely raised would not: PID 1 of a PID namespace
         * ignores the signals it has no handler for). */
        volatile int *nowhere = NULL;
        *nowhere = 1;
    }
}
