/* PID 1 of every agent container (containers.INIT_COMMAND), mounted read-only from the
 * host: it starts nothing, reaps orphans and exits on SIGTERM or SIGINT, as catatonit -P
 * did, and it is not dumpable. Every signal glibc lets a program block is blocked and taken
 * with sigwait (glibc keeps its two internal ones, 32 and 33, at their default action,
 * which the kernel drops for a PID namespace's init when they come from inside it).
 *
 * Why its own: the agent is root in its container, as catatonit was, with the same
 * capabilities, so it could ptrace PID 1 (or write /proc/1/mem) and make init run a
 * program of its own, which every stray sweep spares (init is the one process left) and
 * which outlived every task, /stop and restart. A process that is not dumpable can be
 * traced or have its memory opened only with CAP_SYS_PTRACE, which the container does not
 * have. Dumpability is reset by every execve, so init must drop it itself: no exec after.
 *
 * Built static by scripts/setup.d/40-podman-sandbox.sh: a dynamic binary would load the
 * image's libc, which is the agent's file, into PID 1. */
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>

int main(void) {
    sigset_t all;
    sigfillset(&all);
    if (sigprocmask(SIG_BLOCK, &all, NULL) != 0) {
        perror("gateway-bot-init: sigprocmask");
        return 1;
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        perror("gateway-bot-init: prctl(PR_SET_DUMPABLE)");
        return 1;
    }
    for (;;) {
        int sig = 0;
        if (sigwait(&all, &sig) != 0) {
            continue;
        }
        if (sig == SIGCHLD) {
            while (waitpid(-1, NULL, WNOHANG) > 0) {
            }
        } else if (sig == SIGTERM || sig == SIGINT) {
            return 0;
        }
    }
}
