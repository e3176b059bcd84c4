/* WASI files under the preopens the grants give (integration-tests/wasm_test.cc): reads and
 * writes /vault/pub/wasm through stdio, lists it, and tries the ways out: a ".." above the
 * preopen, a path under no preopen, and a symlink planted in the granted tree. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void refused(const char* path) {
  errno = 0;
  FILE* f = fopen(path, "r");
  if (f != NULL) {
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    printf("%s: OPENED (%zu bytes: %s)\n", path, n, buf);
    fclose(f);
    return;
  }
  printf("%s: refused (errno %d)\n", path, errno);
}

static int compare(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

int main(void) {
  char buf[128] = {0};
  FILE* in = fopen("/vault/pub/wasm/in.txt", "r");
  if (in == NULL) {
    printf("in.txt: cannot open (errno %d)\n", errno);
    return 1;
  }
  size_t n = fread(buf, 1, sizeof(buf) - 1, in);
  fclose(in);
  printf("read in.txt: %.*s\n", (int)n, buf);

  FILE* out = fopen("/vault/pub/wasm/out.txt", "w");
  if (out == NULL) {
    printf("out.txt: cannot create (errno %d)\n", errno);
    return 1;
  }
  fprintf(out, "written by wasm, ");
  fprintf(out, "in two writes");
  fclose(out);
  FILE* back = fopen("/vault/pub/wasm/out.txt", "r");
  memset(buf, 0, sizeof(buf));
  n = back != NULL ? fread(buf, 1, sizeof(buf) - 1, back) : 0;
  if (back != NULL) fclose(back);
  printf("out.txt: %.*s\n", (int)n, buf);

  DIR* dir = opendir("/vault/pub/wasm");
  if (dir == NULL) {
    printf("opendir: errno %d\n", errno);
    return 1;
  }
  char* names[16];
  int count = 0;
  for (struct dirent* e = readdir(dir); e != NULL && count < 16; e = readdir(dir)) {
    names[count++] = strdup(e->d_name);
  }
  closedir(dir);
  qsort(names, (size_t)count, sizeof(names[0]), compare);
  printf("dir:");
  for (int i = 0; i < count; ++i) printf(" %s", names[i]);
  printf("\n");

  refused("/vault/pub/../secret/s.txt");
  refused("/vault/pub/wasm/../../secret/s.txt");
  refused("/etc/passwd");
  refused("/vault/pub/wasm/link.txt");
  return 0;
}
