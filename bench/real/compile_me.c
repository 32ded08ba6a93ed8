/* A C translation unit for the real-program benchmark (bench/real_programs.py):
 * gcc -O2 -c compiles it under each allocator and the object files are compared.
 * It is never linked or run; it gives the compiler the kinds of code a C project
 * has: a bytecode interpreter with a large switch, a hash table, string
 * handling, and generic containers and sorts stamped out by macros for many
 * element types (so inlining, vectorisation and loop passes have work to do).
 * -DBRISK_REAL_QUICK stamps out fewer of them (the benchmark's --quick size). */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- interpreter */

enum op {
  OP_PUSH, OP_POP, OP_DUP, OP_SWAP, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_NEG,
  OP_AND, OP_OR, OP_XOR, OP_SHL, OP_SHR, OP_EQ, OP_LT, OP_GT, OP_JMP, OP_JZ, OP_JNZ,
  OP_LOAD, OP_STORE, OP_CALL, OP_RET, OP_PRINT, OP_HALT, OP_MIN, OP_MAX, OP_ABS,
  OP_INC, OP_DEC, OP_ROT, OP_OVER, OP_NIP, OP_TUCK
};

struct vm {
  int64_t stack[256];
  int64_t vars[64];
  size_t ret[64];
  int sp, rp;
  char out[4096];
  size_t out_len;
};

static void vm_print(struct vm *vm, int64_t value) {
  char digits[24];
  int n = 0;
  uint64_t u = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
  do {
    digits[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (value < 0) digits[n++] = '-';
  while (n && vm->out_len + 1 < sizeof vm->out) vm->out[vm->out_len++] = digits[--n];
  if (vm->out_len + 1 < sizeof vm->out) vm->out[vm->out_len++] = '\n';
}

int vm_run(struct vm *vm, const int64_t *code, size_t len) {
  size_t pc = 0;
  for (long steps = 0; pc < len && steps < 100000000; steps++) {
    int64_t a, b;
    switch ((enum op)code[pc++]) {
    case OP_PUSH: vm->stack[vm->sp++] = code[pc++]; break;
    case OP_POP: vm->sp--; break;
    case OP_DUP: vm->stack[vm->sp] = vm->stack[vm->sp - 1]; vm->sp++; break;
    case OP_SWAP:
      a = vm->stack[vm->sp - 1];
      vm->stack[vm->sp - 1] = vm->stack[vm->sp - 2];
      vm->stack[vm->sp - 2] = a;
      break;
#define BINARY(name, expr)                                      \
    case name:                                                  \
      b = vm->stack[--vm->sp];                                  \
      a = vm->stack[vm->sp - 1];                                \
      vm->stack[vm->sp - 1] = (expr);                           \
      break;
    BINARY(OP_ADD, a + b)
    BINARY(OP_SUB, a - b)
    BINARY(OP_MUL, a * b)
    BINARY(OP_DIV, b ? a / b : 0)
    BINARY(OP_MOD, b ? a % b : 0)
    BINARY(OP_AND, a & b)
    BINARY(OP_OR, a | b)
    BINARY(OP_XOR, a ^ b)
    BINARY(OP_SHL, (int64_t)((uint64_t)a << (b & 63)))
    BINARY(OP_SHR, a >> (b & 63))
    BINARY(OP_EQ, a == b)
    BINARY(OP_LT, a < b)
    BINARY(OP_GT, a > b)
    BINARY(OP_MIN, a < b ? a : b)
    BINARY(OP_MAX, a > b ? a : b)
#undef BINARY
    case OP_NEG: vm->stack[vm->sp - 1] = -vm->stack[vm->sp - 1]; break;
    case OP_ABS: a = vm->stack[vm->sp - 1]; vm->stack[vm->sp - 1] = a < 0 ? -a : a; break;
    case OP_INC: vm->stack[vm->sp - 1]++; break;
    case OP_DEC: vm->stack[vm->sp - 1]--; break;
    case OP_JMP: pc = (size_t)code[pc]; break;
    case OP_JZ: pc = vm->stack[--vm->sp] ? pc + 1 : (size_t)code[pc]; break;
    case OP_JNZ: pc = vm->stack[--vm->sp] ? (size_t)code[pc] : pc + 1; break;
    case OP_LOAD: vm->stack[vm->sp++] = vm->vars[code[pc++] & 63]; break;
    case OP_STORE: vm->vars[code[pc++] & 63] = vm->stack[--vm->sp]; break;
    case OP_CALL: vm->ret[vm->rp++] = pc + 1; pc = (size_t)code[pc]; break;
    case OP_RET: if (!vm->rp) return -1; pc = vm->ret[--vm->rp]; break;
    case OP_PRINT: vm_print(vm, vm->stack[--vm->sp]); break;
    case OP_HALT: return 0;
    case OP_ROT:
      a = vm->stack[vm->sp - 3];
      vm->stack[vm->sp - 3] = vm->stack[vm->sp - 2];
      vm->stack[vm->sp - 2] = vm->stack[vm->sp - 1];
      vm->stack[vm->sp - 1] = a;
      break;
    case OP_OVER: vm->stack[vm->sp] = vm->stack[vm->sp - 2]; vm->sp++; break;
    case OP_NIP: vm->stack[vm->sp - 2] = vm->stack[vm->sp - 1]; vm->sp--; break;
    case OP_TUCK:
      a = vm->stack[vm->sp - 1];
      b = vm->stack[vm->sp - 2];
      vm->stack[vm->sp - 2] = a;
      vm->stack[vm->sp - 1] = b;
      vm->stack[vm->sp++] = a;
      break;
    default: return -2;
    }
    if (vm->sp < 0 || vm->sp > 250 || vm->rp < 0 || vm->rp > 60) return -3;
  }
  return 1;
}

/* ---------------------------------------------------------------- hash table */

struct entry {
  char *key;
  size_t len;
  uint64_t hash;
  long value;
};

struct table {
  struct entry *slots;
  size_t cap, count;
};

static uint64_t hash_bytes(const char *p, size_t n) {
  uint64_t h = 1469598103934665603u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211u;
  return h ^ (h >> 29);
}

static int table_grow(struct table *t) {
  size_t cap = t->cap ? t->cap * 2 : 64;
  struct entry *slots = calloc(cap, sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i < t->cap; i++) {
    struct entry *e = &t->slots[i];
    if (!e->key) continue;
    size_t j = e->hash & (cap - 1);
    while (slots[j].key) j = (j + 1) & (cap - 1);
    slots[j] = *e;
  }
  free(t->slots);
  t->slots = slots;
  t->cap = cap;
  return 0;
}

long *table_get(struct table *t, const char *key, size_t len, int create) {
  if (t->count * 4 >= t->cap * 3 && table_grow(t)) return NULL;
  uint64_t h = hash_bytes(key, len);
  size_t j = h & (t->cap - 1);
  for (; t->slots[j].key; j = (j + 1) & (t->cap - 1)) {
    struct entry *e = &t->slots[j];
    if (e->hash == h && e->len == len && !memcmp(e->key, key, len)) return &e->value;
  }
  if (!create) return NULL;
  char *copy = malloc(len + 1);
  if (!copy) return NULL;
  memcpy(copy, key, len);
  copy[len] = 0;
  t->slots[j] = (struct entry){copy, len, h, 0};
  t->count++;
  return &t->slots[j].value;
}

size_t count_words(struct table *t, const char *text) {
  size_t words = 0;
  while (*text) {
    while (*text && !((*text >= 'a' && *text <= 'z') || (*text >= 'A' && *text <= 'Z'))) text++;
    const char *start = text;
    while ((*text >= 'a' && *text <= 'z') || (*text >= 'A' && *text <= 'Z')) text++;
    if (text > start) {
      long *v = table_get(t, start, (size_t)(text - start), 1);
      if (v) ++*v;
      words++;
    }
  }
  return words;
}

/* ---------------------------------------------------------------- generic code */

/* A growable vector, an insertion-sorted merge sort, a binary search, a running
 * statistic and a histogram for element type T, named with suffix N. */
#define DEFINE_FOR(T, N)                                                              \
  struct vec_##N { T *data; size_t len, cap; };                                      \
  int vec_##N##_push(struct vec_##N *v, T x) {                                       \
    if (v->len == v->cap) {                                                          \
      size_t cap = v->cap ? v->cap * 2 : 16;                                         \
      T *d = realloc(v->data, cap * sizeof *d);                                      \
      if (!d) return -1;                                                             \
      v->data = d;                                                                   \
      v->cap = cap;                                                                  \
    }                                                                                \
    v->data[v->len++] = x;                                                           \
    return 0;                                                                        \
  }                                                                                  \
  static void insertion_##N(T *a, size_t n) {                                        \
    for (size_t i = 1; i < n; i++) {                                                 \
      T x = a[i];                                                                    \
      size_t j = i;                                                                  \
      for (; j > 0 && a[j - 1] > x; j--) a[j] = a[j - 1];                            \
      a[j] = x;                                                                      \
    }                                                                                \
  }                                                                                  \
  int sort_##N(T *a, size_t n) {                                                     \
    if (n < 2) return 0;                                                             \
    T *tmp = malloc(n * sizeof *tmp);                                                \
    if (!tmp) return -1;                                                             \
    for (size_t i = 0; i < n; i += 16) insertion_##N(a + i, n - i < 16 ? n - i : 16); \
    for (size_t width = 16; width < n; width *= 2) {                                 \
      for (size_t lo = 0; lo < n; lo += 2 * width) {                                 \
        size_t mid = lo + width < n ? lo + width : n;                                \
        size_t hi = lo + 2 * width < n ? lo + 2 * width : n;                         \
        size_t i = lo, j = mid, k = lo;                                              \
        while (i < mid && j < hi) tmp[k++] = a[j] < a[i] ? a[j++] : a[i++];          \
        while (i < mid) tmp[k++] = a[i++];                                           \
        while (j < hi) tmp[k++] = a[j++];                                            \
      }                                                                              \
      memcpy(a, tmp, n * sizeof *a);                                                 \
    }                                                                                \
    free(tmp);                                                                       \
    return 0;                                                                        \
  }                                                                                  \
  ptrdiff_t search_##N(const T *a, size_t n, T x) {                                  \
    size_t lo = 0, hi = n;                                                           \
    while (lo < hi) {                                                                \
      size_t mid = lo + (hi - lo) / 2;                                               \
      if (a[mid] < x) lo = mid + 1; else hi = mid;                                   \
    }                                                                                \
    return lo < n && a[lo] == x ? (ptrdiff_t)lo : -1;                                \
  }                                                                                  \
  double mean_##N(const T *a, size_t n) {                                            \
    double sum = 0, c = 0;                                                           \
    for (size_t i = 0; i < n; i++) {                                                 \
      double y = (double)a[i] - c, t = sum + y;                                      \
      c = (t - sum) - y;                                                             \
      sum = t;                                                                       \
    }                                                                                \
    return n ? sum / (double)n : 0;                                                  \
  }                                                                                  \
  void histogram_##N(const T *a, size_t n, T lo, T hi, size_t *bins, size_t nbins) { \
    memset(bins, 0, nbins * sizeof *bins);                                           \
    double width = ((double)hi - (double)lo) / (double)nbins;                        \
    for (size_t i = 0; i < n; i++) {                                                 \
      double at = ((double)a[i] - (double)lo) / width;                               \
      size_t b = at < 0 ? 0 : at >= (double)nbins ? nbins - 1 : (size_t)at;          \
      bins[b]++;                                                                     \
    }                                                                                \
  }                                                                                  \
  void scale_##N(T *restrict out, const T *restrict in, size_t n, T k, T add) {      \
    for (size_t i = 0; i < n; i++) out[i] = (T)(in[i] * k + add);                    \
  }                                                                                  \
  T dot_##N(const T *a, const T *b, size_t n) {                                      \
    T acc = 0;                                                                       \
    for (size_t i = 0; i < n; i++) acc += a[i] * b[i];                               \
    return acc;                                                                      \
  }

DEFINE_FOR(int, int)
DEFINE_FOR(double, double)
#ifndef BRISK_REAL_QUICK
DEFINE_FOR(long, long)
DEFINE_FOR(float, float)
DEFINE_FOR(unsigned, unsigned)
DEFINE_FOR(short, short)
DEFINE_FOR(uint64_t, u64)
DEFINE_FOR(int8_t, i8)
DEFINE_FOR(uint16_t, u16)
DEFINE_FOR(long double, ldouble)
#endif
