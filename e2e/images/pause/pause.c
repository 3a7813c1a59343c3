/*
 * pause: the sandbox process of every pod.
 *
 * It holds the pod's namespaces open by doing nothing: it sleeps until a
 * signal arrives. As PID 1 of a shared PID namespace it also reaps orphaned
 * children (SIGCHLD). SIGINT and SIGTERM make it exit 0; anything else is
 * ignored by default as PID 1, so we do not install more handlers.
 *
 * Written for Tusk's local test cluster; build with `gcc -static -O2`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PAUSE_VERSION
#define PAUSE_VERSION "tusk"
#endif

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

static void on_child(int sig)
{
	(void)sig;
	int saved = errno;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

static void install(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) != 0) {
		perror("pause: sigaction");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
		printf("pause %s\n", PAUSE_VERSION);
		return 0;
	}
	if (getpid() != 1)
		fprintf(stderr, "pause: warning: not running as PID 1\n");

	/* Block the signals we handle and only take them inside sigsuspend(),
	 * so a SIGTERM cannot slip in between the check and the wait. */
	sigset_t handled, waitmask;
	sigemptyset(&handled);
	sigaddset(&handled, SIGINT);
	sigaddset(&handled, SIGTERM);
	sigaddset(&handled, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &handled, &waitmask) != 0) {
		perror("pause: sigprocmask");
		return 1;
	}
	sigdelset(&waitmask, SIGINT);
	sigdelset(&waitmask, SIGTERM);
	sigdelset(&waitmask, SIGCHLD);

	install(SIGINT, on_stop, 0);
	install(SIGTERM, on_stop, 0);
	install(SIGCHLD, on_child, SA_NOCLDSTOP);

	while (!stop_signal)
		sigsuspend(&waitmask);

	fprintf(stderr, "pause: shutting down, got signal %d\n", (int)stop_signal);
	return 0;
}
