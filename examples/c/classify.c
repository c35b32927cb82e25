/* examples/c/classify.c — kiln from C: build an ONNX model, run it on one input, print the outputs.
 *   cc classify.c -I<kiln>/include -L<kiln>/lib -lkiln -o classify
 *   ./classify examples/tiny_cnn.onnx image 1x3x32x32      (the input filled with 0.5) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_c.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL.onnx INPUT_NAME DIMS (e.g. 1x3x32x32)\n", argv[0]);
    return 2;
  }
  int64_t shape[8];
  size_t rank = 0, count = 1;
  for (char* d = strtok(argv[3], "x"); d && rank < 8; d = strtok(NULL, "x")) count *= (size_t)(shape[rank++] = atoll(d));
  float* data = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) data[i] = 0.5f;

  KilnEngine* engine = NULL;
  KilnContext* ctx = NULL;
  KilnOutputs* out = NULL;
  KilnTensor in = {argv[2], 1 /* float32 */, rank, shape, data};
  if (kiln_engine_build(argv[1], NULL, &engine) != KILN_OK || kiln_context_create(engine, &ctx) != KILN_OK ||
      kiln_context_run(ctx, &in, 1, &out) != KILN_OK) {
    fprintf(stderr, "kiln: %s\n", kiln_last_error());
    return 1;
  }
  for (size_t i = 0; i < kiln_outputs_count(out); ++i) {
    KilnTensor y;
    if (kiln_outputs_get(out, i, &y) != KILN_OK || y.dtype != 1) continue;
    size_t n = 1;
    for (size_t k = 0; k < y.rank; ++k) n *= (size_t)y.shape[k];
    printf("%s:", y.name);
    for (size_t k = 0; k < n && k < 10; ++k) printf(" %.4f", ((const float*)y.data)[k]);
    printf("%s\n", n > 10 ? " ..." : "");
  }
  kiln_outputs_release(out);
  kiln_context_release(ctx);
  kiln_engine_release(engine);
  free(data);
  return 0;
}
