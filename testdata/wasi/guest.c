// guest.c: a WASI preview1 command for sandboxd's tests, built with Debian's
// clang and wasi-libc (make wasi-guests). argv[1] picks what it does:
//
//   echo              copy stdin to stdout, then "<n> bytes\n" to stderr
//   args              print each argument after argv[1], one per line
//   env               print the environment, one NAME=value per line, sorted
//                     by the host
//   cat PATH...       print the files
//   write PATH TEXT   create PATH with TEXT, read it back, print it
//   exit N            exit with status N
//   tick N MS         print "tick <i>" N times, MS milliseconds apart
//   sleep MS          sleep MS milliseconds, then print "woke"
//   hog               allocate 1 MiB blocks (touching them) until malloc
//                     fails, then exit 1
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern char **environ;

static void sleep_ms(long ms) {
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static int cat(const char *path) {
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return 1;
	}
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
	fclose(f);
	return 0;
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "";
	if (!strcmp(mode, "echo")) {
		char buf[4096];
		size_t n, total = 0;
		while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) {
			fwrite(buf, 1, n, stdout);
			total += n;
		}
		fprintf(stderr, "%zu bytes\n", total);
		return 0;
	}
	if (!strcmp(mode, "args")) {
		for (int i = 2; i < argc; i++) printf("%s\n", argv[i]);
		return 0;
	}
	if (!strcmp(mode, "env")) {
		for (char **e = environ; *e; e++) printf("%s\n", *e);
		return 0;
	}
	if (!strcmp(mode, "cat")) {
		int rc = 0;
		for (int i = 2; i < argc; i++) rc |= cat(argv[i]);
		return rc;
	}
	if (!strcmp(mode, "write") && argc == 4) {
		FILE *f = fopen(argv[2], "w");
		if (!f) {
			fprintf(stderr, "%s: %s\n", argv[2], strerror(errno));
			return 1;
		}
		fputs(argv[3], f);
		fclose(f);
		return cat(argv[2]);
	}
	if (!strcmp(mode, "exit") && argc == 3) return atoi(argv[2]);
	if (!strcmp(mode, "tick") && argc == 4) {
		int n = atoi(argv[2]);
		long ms = atol(argv[3]);
		for (int i = 1; i <= n; i++) {
			printf("tick %d\n", i);
			fflush(stdout);
			if (i < n) sleep_ms(ms);
		}
		return 0;
	}
	if (!strcmp(mode, "sleep") && argc == 3) {
		sleep_ms(atol(argv[2]));
		printf("woke\n");
		return 0;
	}
	if (!strcmp(mode, "hog")) {
		size_t mib = 0;
		void *volatile last = NULL; // keeps the blocks live: no malloc elision
		for (;;) {
			char *p = malloc(1 << 20);
			if (!p) break;
			memset(p, 1, 1 << 20);
			*(void **)p = last;
			last = p;
			mib++;
		}
		fprintf(stderr, "malloc failed after %zu MiB\n", mib);
		return 1;
	}
	fprintf(stderr, "usage: guest echo|args|env|cat|write|exit|tick|sleep|hog ...\n");
	return 2;
}
