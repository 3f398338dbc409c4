/* golden_vision.h — the vision stages of an image golden set (golden-v41/tiny-v README §3, §5):
 * for every image of golden.json["images"], its patches go through the vision tower (vit.h) and
 * each ViT layer, the final norm, the aligner input and the aligner rows are compared with the
 * golden arrays (max |Δ| <= 1e-3, mean <= 5e-5, the float32-engine tolerance).  Sizes come from
 * golden.json's plans and the checkpoint's vision_config. */
#ifndef DI_GOLDEN_VISION_H
#define DI_GOLDEN_VISION_H

#include "golden/golden.h"
#include "model/vit.h"

#include <stdbool.h>

/* Does the set have images (a vision set)? */
bool golden_is_vision(const GoldenSet *g);
size_t golden_n_images(const GoldenSet *g);

/* THE place preprocessed patches enter the vision checks: image k's patches [N][3P²] and its
 * ViT grid.  Today they are the golden `patches` array; the image decoder (src/vision) will
 * produce them from the image file.  *patches points into the set (no copy). */
int golden_image_patches(const GoldenSet *g, size_t k, const float **patches, VitGrid *grid);

/* Run image k through vm and compare every stage; res->name = "image<k>.vision" with the
 * worst array's figures, res->why naming the first failing array.  -1 only when the image cannot
 * be run (bad data, encoder error). */
int golden_run_image(const GoldenSet *g, VisionModel *vm, size_t k, GoldenResult *res);


/* The expanded prompt (README §4): golden.json's placeholder ids with each image_token_id
 * replaced by its image's span (images in prompt_image_order, grids from their plans, rows from
 * the vision tower), compared with prompt.input_ids / prompt.token_types (exact) and
 * prompt.span_embeds (1e-3 / 5e-5).  res->name "prompt.span". */
int golden_run_prompt(const GoldenSet *g, VisionModel *vm, int64_t image_token_id, GoldenResult *res);

#endif
