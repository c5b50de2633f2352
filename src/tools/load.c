/* Model loading for the CLI: device choice (-ngl / --device) and the one log line saying where
 * the model runs. A GPU that was asked for and cannot be used is an error, never a CPU run. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "load.h"
#include "rocmforge.h"

rf_model *rf_cli_load(const rf_args *a) {
    if (!a->model) {
        rf_fail("no model: give -m FILE.gguf");
        return NULL;
    }
    rf_model_params mp = rf_model_default_params();
    mp.n_threads = a->n_threads;
    mp.n_gpu_layers = a->n_gpu_layers;
    const char *device = a->device;
    /* Default: the GPU when one is present. A GPU asked for (--device gpu, or -ngl N > 0) that
     * cannot be used is an error in rf_model_load, never a CPU run. */
    if (!device) device = a->n_gpu_layers == 0 || (a->n_gpu_layers < 0 && rf_gpu_devices() == 0) ? "cpu" : "gpu";
    if (!strncmp(device, "gpu", 3) && a->n_gpu_layers == 0) {
        rf_fail("--device %s with -ngl 0 asks for no layers on the GPU; use --device cpu", device);
        return NULL;
    }
    mp.device = device;
    rf_model *m = rf_model_load(a->model, &mp);
    if (!m) {
        rf_fail("%s", rf_error());
        return NULL;
    }
    fprintf(stderr, "rocmforge: %s on %s\n", a->model, rf_model_backend(m));
    return m;
}

rf_context *rf_cli_context(rf_model *m, int n_ctx, int n_batch, int kv_type) {
    rf_context_params cp = rf_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.kv_type = kv_type;
    rf_context *c = rf_context_new(m, &cp);
    if (!c) rf_fail("%s", rf_error());
    return c;
}
