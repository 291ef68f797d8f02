/* tessera runner: run a compiled model's library without Python (tessera/cross/qemu.py).
 *
 *   runner LIB --metadata
 *       prints the library's tessera_metadata (JSON: the functions and the executor plan)
 *   runner LIB --arena NBYTES [--threads N] [--runs N] --input PATH ... --output NBYTES ...
 *          --save KIND:INDEX:NBYTES:PATH ...
 *       reads each input file into a 64-byte aligned buffer (in plan order), allocates each
 *       output buffer (0 bytes: the output is stored elsewhere, its pointer is NULL) and the
 *       arena, calls the library's entry tessera_model_run (--runs times: 1), then writes each
 *       --save's NBYTES to PATH: KIND is input, output (INDEX: its position) or param (INDEX:
 *       byte offset into tessera_params). Two runs minus one run is one run's instructions.
 *
 *   runner LIB --kernel NAME [--threads N] [--runs N] --buffer NBYTES ... [--var N ...]
 *       calls one kernel of the library, NAME(buffers, vars) (the calling convention of
 *       docs/architecture.md), on zero-filled 64-byte aligned buffers of those sizes and the
 *       int64 vars given: what count_kernel_instructions runs to count one kernel alone.
 *
 * A library built for a fixed SVE vector length (tessera_sve_vector_bits) runs only where the
 * thread got that length (tessera_sve_vector_bits_now): else exit 3 with both lengths.
 *
 * It exits 0 on success; 2 for a bad command line, 3 for a library or file error, 4 when the
 * entry returns nonzero (the failing call is printed). Errors go to stderr, one line each.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUFFERS 256
#define ALIGNMENT 64

typedef int32_t (*entry_fn)(void**, void**, const void*, void*, int64_t*);
typedef void (*set_threads_fn)(int32_t);
typedef int32_t (*kernel_fn)(void**, int64_t*);

static void* must_alloc(int64_t nbytes) {
    void* p = NULL;
    /* at least one aligned line, so that an empty buffer is still a valid pointer */
    if (posix_memalign(&p, ALIGNMENT, (size_t)(nbytes > 0 ? nbytes : ALIGNMENT)) != 0) {
        fprintf(stderr, "runner: out of memory allocating %lld bytes\n", (long long)nbytes);
        exit(3);
    }
    memset(p, 0, (size_t)(nbytes > 0 ? nbytes : ALIGNMENT));
    return p;
}

static void* read_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "runner: cannot open input %s\n", path);
        exit(3);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void* buf = must_alloc(n);
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "runner: cannot read input %s\n", path);
        exit(3);
    }
    fclose(f);
    return buf;
}

static void write_file(const char* path, const void* data, int64_t nbytes) {
    FILE* f = fopen(path, "wb");
    if (!f || (nbytes > 0 && fwrite(data, 1, (size_t)nbytes, f) != (size_t)nbytes)) {
        fprintf(stderr, "runner: cannot write %s\n", path);
        exit(3);
    }
    fclose(f);
}

static void* must_sym(void* lib, const char* name, int required) {
    void* p = dlsym(lib, name);
    if (!p && required) {
        fprintf(stderr, "runner: the library has no symbol %s\n", name);
        exit(3);
    }
    return p;
}

static int save(char* spec, void** inputs, int n_in, void** outputs, int n_out, void* params) {
    /* KIND:INDEX:NBYTES:PATH (the path may hold ':' itself) */
    char* kind = strtok(spec, ":");
    char* index = strtok(NULL, ":");
    char* nbytes = strtok(NULL, ":");
    char* path = strtok(NULL, "");
    if (!kind || !index || !nbytes || !path) return 2;
    long long i = atoll(index);
    const uint8_t* data = NULL;
    if (!strcmp(kind, "input") && i >= 0 && i < n_in) data = inputs[i];
    if (!strcmp(kind, "output") && i >= 0 && i < n_out) data = outputs[i];
    if (!strcmp(kind, "param") && params && i >= 0) data = (const uint8_t*)params + i;
    if (!data) return 2;
    write_file(path, data, atoll(nbytes));
    return 0;
}

static int run_kernel(void* lib, int argc, char** argv) {
    /* argv[2] == "--kernel", argv[3] = NAME, then flags */
    void* buffers[MAX_BUFFERS];
    int64_t vars[MAX_BUFFERS];
    int n_buf = 0, n_var = 0, threads = 0, runs = 1;
    for (int a = 4; a < argc; a += 2) {
        if (a + 1 >= argc) return 2;
        const char* flag = argv[a];
        const char* value = argv[a + 1];
        if (!strcmp(flag, "--buffer") && n_buf < MAX_BUFFERS) {
            buffers[n_buf++] = must_alloc(atoll(value));
        } else if (!strcmp(flag, "--var") && n_var < MAX_BUFFERS) {
            vars[n_var++] = atoll(value);
        } else if (!strcmp(flag, "--threads")) {
            threads = atoi(value);
        } else if (!strcmp(flag, "--runs")) {
            runs = atoi(value);
        } else {
            fprintf(stderr, "runner: bad argument %s\n", flag);
            return 2;
        }
    }
    kernel_fn kernel = (kernel_fn)must_sym(lib, argv[3], 1);
    if (threads > 0) ((set_threads_fn)must_sym(lib, "tessera_set_num_threads", 1))(threads);
    for (int r = 0; r < runs; r++) {
        if (kernel(buffers, vars) != 0) {
            fprintf(stderr, "runner: kernel %s failed\n", argv[3]);
            return 4;
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIB --metadata | LIB --kernel NAME --buffer NBYTES..."
                        " | LIB --arena N [--threads N] --input PATH..."
                        " --output NBYTES... --save KIND:INDEX:NBYTES:PATH...\n", argv[0]);
        return 2;
    }
    /* a bare file name is a file here, not a library for dlopen to search the system for */
    char path[4096];
    snprintf(path, sizeof path, "%s%s", strchr(argv[1], '/') ? "" : "./", argv[1]);
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "runner: cannot load %s: %s\n", argv[1], dlerror());
        return 3;
    }
    const int32_t* sve_bits = (const int32_t*)dlsym(lib, "tessera_sve_vector_bits");
    if (sve_bits && strcmp(argv[2], "--metadata")) {
        int32_t now = ((int32_t(*)(void))must_sym(lib, "tessera_sve_vector_bits_now", 1))();
        if (now == 0) {
            fprintf(stderr, "runner: %s was built for %d-bit SVE vectors, this CPU has no SVE "
                    "(build for it without SVE: -mattr=-sve)\n", argv[1], *sve_bits);
            return 3;
        }
        if (now != *sve_bits) {
            fprintf(stderr, "runner: %s was built for %d-bit SVE vectors, this CPU runs %d-bit "
                    "ones (build with -msve-vector-bits=%d)\n", argv[1], *sve_bits, now, now);
            return 3;
        }
    }
    if (!strcmp(argv[2], "--metadata")) {
        fputs((const char*)must_sym(lib, "tessera_metadata", 1), stdout);
        return 0;
    }
    if (!strcmp(argv[2], "--kernel")) return argc < 4 ? 2 : run_kernel(lib, argc, argv);
    void* inputs[MAX_BUFFERS];
    void* outputs[MAX_BUFFERS];
    char* saves[MAX_BUFFERS];
    int n_in = 0, n_out = 0, n_save = 0;
    int64_t arena_nbytes = 0;
    int threads = 0, runs = 1;
    for (int a = 2; a < argc; a += 2) {
        if (a + 1 >= argc) return 2;
        const char* flag = argv[a];
        char* value = argv[a + 1];
        if (!strcmp(flag, "--arena")) {
            arena_nbytes = atoll(value);
        } else if (!strcmp(flag, "--threads")) {
            threads = atoi(value);
        } else if (!strcmp(flag, "--runs")) {
            runs = atoi(value);
        } else if (!strcmp(flag, "--input") && n_in < MAX_BUFFERS) {
            inputs[n_in++] = read_file(value);
        } else if (!strcmp(flag, "--output") && n_out < MAX_BUFFERS) {
            int64_t n = atoll(value);
            outputs[n_out++] = n > 0 ? must_alloc(n) : NULL;
        } else if (!strcmp(flag, "--save") && n_save < MAX_BUFFERS) {
            saves[n_save++] = value;
        } else {
            fprintf(stderr, "runner: bad argument %s\n", flag);
            return 2;
        }
    }
    entry_fn entry = (entry_fn)must_sym(lib, "tessera_model_run", 1);
    void* params = must_sym(lib, "tessera_params", 0); /* a model without weights has none */
    if (threads > 0) ((set_threads_fn)must_sym(lib, "tessera_set_num_threads", 1))(threads);
    void* arena = must_alloc(arena_nbytes);
    for (int r = 0; r < runs; r++) {
        int32_t rc = entry(inputs, outputs, params, arena, NULL);
        if (rc != 0) {
            fprintf(stderr, "runner: call %d of the executor plan failed\n", rc - 1);
            return 4;
        }
    }
    for (int s = 0; s < n_save; s++) {
        if (save(saves[s], inputs, n_in, outputs, n_out, params) != 0) {
            fprintf(stderr, "runner: bad --save %s\n", saves[s]);
            return 2;
        }
    }
    return 0;
}
