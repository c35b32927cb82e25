/* tests/c/test_c_api.c — kiln's C API (include/kiln/kiln_c.h) from C99: build the bundled example,
 * read its I/O, run it (softmax outputs sum to 1; the same run twice gives the same bytes), save and
 * load the engine, and the errors a C caller meets (a missing file, an unknown input name, a wrong
 * element type or rank, NULL arguments, a bad option) with their codes and messages. Exit 0 on
 * success; each failed check prints a line. Run by ctest (c_api) with the source folder as argv[1]. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln/kiln_c.h"

static int failures = 0;

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kiln_last_error());                                                                \
      ++failures;                                                                                \
    }                                                                                            \
  } while (0)

static int contains(const char* s, const char* part) { return s && strstr(s, part) != NULL; }

/* A float32 [1, 3, 32, 32] .npy file (format 1.0) of values from `seed`: one calibration set. */
static int write_npy(const char* path, unsigned seed) {
  FILE* f = fopen(path, "wb");
  if (!f) return 0;
  char header[128];
  int n = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 32, 32), }");
  while ((10 + n + 1) % 64 != 0) header[n++] = ' ';
  header[n++] = '\n';
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const unsigned char len[2] = {(unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
  fwrite(magic, 1, 8, f);
  fwrite(len, 1, 2, f);
  fwrite(header, 1, (size_t)n, f);
  for (unsigned i = 0; i < 3 * 32 * 32; ++i) {
    const float v = (float)(((i + seed) * 7919u) % 1000u) / 1000.0f - 0.5f;
    fwrite(&v, sizeof v, 1, f);
  }
  return fclose(f) == 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SOURCE_DIR TEMP_DIR\n", argv[0]);
    return 2;
  }
  char model[4096], saved[4096];
  snprintf(model, sizeof model, "%s/examples/tiny_cnn.onnx", argv[1]);
  snprintf(saved, sizeof saved, "%s/c_api_tiny_cnn.kiln", argv[2]);
  CHECK(strlen(kiln_version()) > 0);

  KilnBuildOptions options;
  kiln_build_options_default(&options);
  CHECK(strcmp(options.device, "cpu") == 0 && options.opt_level == 2);
  CHECK(options.struct_size == sizeof(KilnBuildOptions) && options.calibration_dir == NULL && options.rest_precision == NULL &&
        options.half_outputs == 0);
  {
    /* A program built against the first header (its struct ended at timing_cache) calls the exported
     * function: it writes no byte past that layout, and a build with it takes the later fields' defaults. */
    const size_t first = offsetof(KilnBuildOptions, calibration_dir);
    union {
      KilnBuildOptions options;
      unsigned char bytes[sizeof(KilnBuildOptions) + 16];
    } u;
    unsigned char* old = u.bytes;
    memset(old, 0xAB, sizeof u.bytes);
    (kiln_build_options_default)(&u.options);
    KilnBuildOptions seen;
    memcpy(&seen, old, first);
    CHECK(seen.struct_size == first && seen.opt_level == 2 && strcmp(seen.precision, "fp32") == 0);
    int untouched = 1;
    for (size_t i = first; i < sizeof u.bytes; ++i) untouched = untouched && old[i] == 0xAB;
    CHECK(untouched);
    KilnEngine* e = NULL;
    CHECK(kiln_engine_build(model, &u.options, &e) == KILN_OK && e != NULL);
    kiln_engine_release(e);
  }
  KilnEngine* engine = NULL;
  KilnCode rc = kiln_engine_build(model, &options, &engine);
  CHECK(rc == KILN_OK && engine != NULL);
  if (!engine) return 1;

  CHECK(kiln_engine_input_count(engine) == 1 && kiln_engine_output_count(engine) == 1);
  CHECK(strcmp(kiln_engine_input_name(engine, 0), "image") == 0);
  CHECK(strcmp(kiln_engine_output_name(engine, 0), "probabilities") == 0);
  CHECK(kiln_engine_input_name(engine, 5) == NULL);
  int32_t dtype = 0;
  size_t rank = 0;
  const int64_t* dims = NULL;
  CHECK(kiln_engine_input_info(engine, 0, &dtype, &rank, &dims) == KILN_OK);
  CHECK(dtype == 1 && rank == 4 && dims[1] == 3 && dims[2] == 32 && dims[3] == 32);
  CHECK(kiln_engine_output_info(engine, 3, &dtype, &rank, &dims) == KILN_INVALID_ARGUMENT);
  CHECK(contains(kiln_last_error(), "index 3"));

  KilnContext* ctx = NULL;
  CHECK(kiln_context_create(engine, &ctx) == KILN_OK && ctx != NULL);
  if (!ctx) return 1;
  static float image[2 * 3 * 32 * 32];
  for (size_t i = 0; i < sizeof image / sizeof image[0]; ++i) image[i] = (float)((i * 7919u) % 1000u) / 1000.0f - 0.5f;
  const int64_t shape[4] = {2, 3, 32, 32};
  KilnTensor in = {"image", 1, 4, shape, image};
  KilnOutputs* out = NULL;
  CHECK(kiln_context_run(ctx, &in, 1, &out) == KILN_OK && out != NULL);
  float first[20] = {0};
  if (out) {
    CHECK(kiln_outputs_count(out) == 1);
    KilnTensor y;
    CHECK(kiln_outputs_get(out, 0, &y) == KILN_OK);
    CHECK(strcmp(y.name, "probabilities") == 0 && y.dtype == 1 && y.rank == 2 && y.shape[0] == 2 && y.shape[1] == 10);
    const float* p = (const float*)y.data;
    for (int n = 0; n < 2; ++n) {
      float sum = 0;
      for (int k = 0; k < 10; ++k) sum += p[n * 10 + k];
      CHECK(fabsf(sum - 1.0f) < 1e-5f);
    }
    memcpy(first, p, sizeof first);
    CHECK(kiln_outputs_get(out, 1, &y) == KILN_INVALID_ARGUMENT);
    /* Another run on other data leaves this run's outputs as they were (each KilnOutputs owns them). */
    static float zeros[2 * 3 * 32 * 32];
    KilnTensor in0 = {"image", 1, 4, shape, zeros};
    KilnOutputs* other = NULL;
    CHECK(kiln_context_run(ctx, &in0, 1, &other) == KILN_OK);
    KilnTensor z;
    if (other && kiln_outputs_get(other, 0, &z) == KILN_OK) CHECK(memcmp(z.data, first, sizeof first) != 0);
    CHECK(memcmp(p, first, sizeof first) == 0);
    kiln_outputs_release(other);
  }

  /* Saved and loaded: the same outputs, bit for bit. */
  CHECK(kiln_engine_save(engine, saved) == KILN_OK);
  KilnEngine* loaded = NULL;
  CHECK(kiln_engine_load(saved, &loaded) == KILN_OK && loaded != NULL);
  kiln_engine_release(engine); /* the context keeps what it needs */
  KilnOutputs* again = NULL;
  CHECK(kiln_context_run(ctx, &in, 1, &again) == KILN_OK);
  if (loaded) {
    KilnContext* ctx2 = NULL;
    KilnOutputs* out2 = NULL;
    CHECK(kiln_context_create(loaded, &ctx2) == KILN_OK);
    CHECK(kiln_context_run(ctx2, &in, 1, &out2) == KILN_OK);
    KilnTensor y2;
    if (out2 && kiln_outputs_get(out2, 0, &y2) == KILN_OK) CHECK(memcmp(y2.data, first, sizeof first) == 0);
    kiln_outputs_release(out2);
    kiln_context_release(ctx2);
  }
  KilnTensor y;
  if (again && kiln_outputs_get(again, 0, &y) == KILN_OK) CHECK(memcmp(y.data, first, sizeof first) == 0);
  kiln_outputs_release(again);
  kiln_outputs_release(out);

  /* Errors: codes and messages naming what is wrong. */
  KilnOutputs* none = NULL;
  KilnTensor wrong_name = {"picture", 1, 4, shape, image};
  CHECK(kiln_context_run(ctx, &wrong_name, 1, &none) == KILN_INVALID_ARGUMENT && none == NULL);
  CHECK(contains(kiln_last_error(), "picture"));
  KilnTensor wrong_type = {"image", 7, 4, shape, image};
  CHECK(kiln_context_run(ctx, &wrong_type, 1, &none) == KILN_INVALID_ARGUMENT);
  CHECK(contains(kiln_last_error(), "image"));
  const int64_t flat[2] = {2, 3072};
  KilnTensor wrong_rank = {"image", 1, 2, flat, image};
  CHECK(kiln_context_run(ctx, &wrong_rank, 1, &none) != KILN_OK);
  KilnTensor no_data = {"image", 1, 4, shape, NULL};
  CHECK(kiln_context_run(ctx, &no_data, 1, &none) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "no data"));
  KilnTensor twice[2] = {{"image", 1, 4, shape, image}, {"image", 1, 4, shape, image}};
  CHECK(kiln_context_run(ctx, twice, 2, &none) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "twice"));
  CHECK(kiln_context_run(NULL, &in, 1, &none) == KILN_INVALID_ARGUMENT);
  KilnTensor int4 = {"image", 22, 4, shape, image};
  CHECK(kiln_context_run(ctx, &int4, 1, &none) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "does not take"));
  KilnEngine* missing = NULL;
  CHECK(kiln_engine_load("/nonexistent/model.kiln", &missing) != KILN_OK && missing == NULL);
  CHECK(contains(kiln_last_error(), "/nonexistent/model.kiln"));
  rc = kiln_engine_build("/nonexistent/model.onnx", NULL, &missing);
  CHECK((rc == KILN_IO_ERROR || rc == KILN_NOT_FOUND) && contains(kiln_last_error(), "/nonexistent/model.onnx"));
  options.device = "tpu";
  CHECK(kiln_engine_build(model, &options, &missing) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "tpu"));
  KilnBuildOptions unfilled;
  memset(&unfilled, 0, sizeof unfilled);
  CHECK(kiln_engine_build(model, &unfilled, &missing) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "struct_size"));
  kiln_build_options_default(&options);
  CHECK(options.struct_size == sizeof(KilnBuildOptions));
  options.precision = "fp4";
  CHECK(kiln_engine_build(model, &options, &missing) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "fp4"));
  CHECK(contains(kiln_last_error(), "'int8'")); /* the error lists every name */

  /* An INT8 engine: precision "int8" with a calibration folder (one .npy per set: a one-input model). */
  char calib[4096], set[4200];
  snprintf(calib, sizeof calib, "%s/c_api_calibration", argv[2]);
  mkdir(calib, 0700);
  for (unsigned k = 0; k < 3; ++k) {
    snprintf(set, sizeof set, "%s/set%u.npy", calib, k);
    CHECK(write_npy(set, k * 101u));
  }
  kiln_build_options_default(&options);
  options.precision = "int8";
  CHECK(kiln_engine_build(model, &options, &missing) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "calibration data"));
  options.calibration_dir = calib;
  options.rest_precision = "fp16"; /* a CPU engine's rest is float32 */
  CHECK(kiln_engine_build(model, &options, &missing) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "GPU engines"));
  options.rest_precision = NULL;
  options.half_outputs = 1; /* a CPU engine's outputs are float32 */
  CHECK(kiln_engine_build(model, &options, &missing) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "half_outputs"));
  options.half_outputs = 2;
  CHECK(kiln_engine_build(model, &options, &missing) == KILN_INVALID_ARGUMENT && contains(kiln_last_error(), "expected 0 or 1"));
  options.half_outputs = 0;
  KilnEngine* quantized = NULL;
  CHECK(kiln_engine_build(model, &options, &quantized) == KILN_OK && quantized != NULL);
  if (quantized) {
    KilnContext* qctx = NULL;
    KilnOutputs* qout = NULL;
    CHECK(kiln_context_create(quantized, &qctx) == KILN_OK);
    CHECK(kiln_context_run(qctx, &in, 1, &qout) == KILN_OK);
    KilnTensor q;
    if (qout && kiln_outputs_get(qout, 0, &q) == KILN_OK) {
      const float* p = (const float*)q.data;
      float sum = 0, err = 0;
      for (int k = 0; k < 10; ++k) sum += p[k], err += fabsf(p[k] - first[k]);
      CHECK(fabsf(sum - 1.0f) < 1e-5f && err < 0.1f); /* close to the float32 engine's, not equal */
    }
    kiln_outputs_release(qout);
    kiln_context_release(qctx);
    kiln_engine_release(quantized);
  }
  for (unsigned k = 0; k < 3; ++k) {
    snprintf(set, sizeof set, "%s/set%u.npy", calib, k);
    remove(set);
  }
  remove(calib);

  kiln_context_release(ctx);
  kiln_engine_release(loaded);
  kiln_engine_release(NULL);
  kiln_outputs_release(NULL);
  remove(saved);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  else printf("kiln C API: all checks passed\n");
  return failures ? 1 : 0;
}
