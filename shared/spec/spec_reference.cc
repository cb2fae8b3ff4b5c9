// The spec options' reference text (docs/cli-reference.md): for each field of the spec field
// table, what it is, its allowed values and ranges, and what is refused. --help says the short
// form (SpecField::help); tests/cli_reference_test.cc checks that every field has its text here.
#include <iterator>
#include <map>
#include <utility>

#include "shared/spec/spec_fields.h"

namespace shoal {
namespace {

// One row per field of the spec field table: its name, then its text.
constexpr std::pair<const char*, const char*> kReference[] = {
    {"kind", "experiment kind: {kinds} (the Kinds table above)"},
    {"model",
     "network: mnist_convnet (hogwild, data_loading, data_parallel), resnet18_cifar "
     "(data_parallel), linear_256_512 (multi_model), amoebanet_d (pipeline), torchscript "
     "(your `--model-file`)"},
    {"dataset",
     "directory of MNIST IDX files (gzipped or not), or 'synthetic'; pipeline and "
     "resnet18_cifar take `synthetic` only, multi_model refuses the field"},
    {"start", "how workers start: fork | spawn | forkserver"},
    {"share",
     "weights in one shared segment: yes | no (data_parallel and pipeline: no, and yes is "
     "refused; multi_model and data_loading refuse the field)"},
    {"device",
     "cpu | cuda (hogwild and pipeline; hogwild with `--start fork` only `--share no`; see "
     "\"[Running on a GPU node](gpu-node.md)\")"},
    {"cuda_sync",
     "hogwild on cuda: `phases` waits for the device before each phase time is read (data, "
     "forward, backward, update), so the split is the work done; `step` waits once a step, "
     "when its loss is read (as a PyTorch loop that logs its loss does), so the device runs "
     "one phase while the CPU queues the next, and the phase split is absent. Refused on the "
     "CPU and by the other kinds. An axis (`--cuda-sync phases,step` compares them)"},
    {"cuda_devices",
     "device cuda: CUDA ordinals, comma-separated; worker (stage) i trains on the (i mod "
     "n)-th (`0,0,1,1`: two stages a GPU). The default is written into the spec, so a record "
     "says where each worker ran; ordinals past the worker count are unused (one list serves "
     "a sweep over stages). Shared weights live on one device, so hogwild with `--share yes` "
     "takes one. Ordinals the worker's LibTorch does not see are refused. Not an axis"},
    {"optimizer", "sgd | nesterov | adagrad | adadelta | adam | adamw | rmsprop"},
    {"lr", "learning rate; (0, 10]"},
    {"momentum", "sgd, nesterov, rmsprop; [0, 1); nesterov > 0"},
    {"dampening", "sgd; [0, 1]; nesterov 0"},
    {"weight_decay", "every optimizer (L2; adamw decoupled); [0, 1]"},
    {"eps", "adagrad, adadelta, adam, adamw, rmsprop; (0, 1]"},
    {"lr_decay", "adagrad; [0, 1]"},
    {"initial_accumulator_value", "adagrad; [0, 1000]"},
    {"rho", "adadelta; [0, 1)"},
    {"beta1", "adam, adamw; [0, 1)"},
    {"beta2", "adam, adamw; [0, 1)"},
    {"amsgrad", "adam, adamw: yes | no"},
    {"alpha", "rmsprop smoothing constant; [0, 1)"},
    {"centered", "rmsprop: yes | no"},
    {"optimizer_in_backward",
     "hogwild on cpu, every optimizer: yes steps each parameter, and frees its gradient, as "
     "soon as the backward pass has accumulated it, so no worker holds a whole model's "
     "gradients (the same update: docs/your-model.md); yes | no"},
    {"batch_size",
     "samples per batch; 1 .. 4096; data_parallel: each worker's with `--scaling weak`, the "
     "whole step's (split evenly) with `strong`"},
    {"batches", "batches per worker (exclusive with epochs); 1 .. 1000000"},
    {"epochs", "passes over the training set, split over the workers; 1 .. 1000"},
    {"epoch_samples",
     "training samples an epoch covers, only with `--epochs`; 1 .. the training set (more is "
     "refused by the leader once it has read the set, naming both sizes: `epoch_samples: "
     "99999 is more than the 60000 training images of ...`)"},
    {"threads",
     "intra-op threads per worker (data_loading: the trainer's; loaders run one); 1 .. 256"},
    {"seed", "random seed; 0 .. 2^64-1"},
    {"allocator",
     "cache (exact-size reuse of step buffers) | planned (one arena, offsets planned from a "
     "traced step; hogwild, data_parallel) | retain (glibc heap, never trimmed) | system"},
    {"concurrent_steps",
     "hogwild: at most this many workers inside a training step at once; the others wait their "
     "turn between steps, first come first served. Fewer than the workers: the planned "
     "allocator's step arenas are shared, this many for all the workers (docs/allocators.md). "
     "1 .. workers"},
    {"activations",
     "pytorch (what PyTorch's autograd keeps for backward) | lean (mnist_convnet: max-pool "
     "keeps its indices only, fused with the ReLU; bit-identical)"},
    {"kernels",
     "shoal (Shoal's CPU kernels where it has one, registered in LibTorch's dispatcher in place "
     "of its own: max_pool2d with kernel = stride, float NCHW, forward and backward; the same "
     "results bit for bit, several times faster) | libtorch (LibTorch's own everywhere, as a "
     "PyTorch program runs)"},
    {"eval_samples",
     "test images evaluated after training (0: none); 0 (none) .. 10000; pipeline refuses any "
     "other value (it trains on random images)"},
    {"sample_interval_ms", "telemetry interval; 20 .. 60000"},
    {"stall_timeout_ms",
     "fail when a worker has no heartbeat this long (0: off); 0 (off) or 500 .. 3600000"},
    {"step_timeout_ms",
     "fail when no training worker makes progress (a step, a loader's batch, an evaluation "
     "batch) this long: a deadlock inside a step, which its heartbeat thread does not show "
     "(0: off); 0 (off) or 500 .. 86400000. Not given with a model file: 100x the leader's probe "
     "step x the cores' oversubscription, 5 s .. 1800000, which bounds each worker's warm-up too "
     "(docs/your-model.md, \"Bounds\")"},
    {"model_file",
     "hogwild, data_parallel: your TorchScript model, a file path the CLI uploads (shoald "
     "stores it by its sha256; see [docs/your-model.md](your-model.md)); a sweep takes several"},
    {"input",
     "what the model's forward takes: `float32[B,3,32,32]`, several separated by `;`, `B` the "
     "batch (anywhere), integer inputs with their range (`int64[B,16]:1000`)"},
    {"loss",
     "cross_entropy (forward returns `[B, classes]`) | mse (targets shaped like the output) | "
     "output (forward(inputs..., targets) returns the loss)"},
    {"classes", "cross_entropy and output: targets in [0, classes); 2 .. 1000000"},
    {"memory_format",
     "model_file: contiguous (as saved) | channels_last: every parameter, buffer and input of "
     "rank 4 in NHWC order (the shared weight segment too), so oneDNN's convolutions skip their "
     "reorders; the same math in another memory order (docs/your-model.md, measured options)"},
    {"autocast",
     "model_file: no | bfloat16: forward under CPU autocast (matrix products and convolutions "
     "in bfloat16; the loss, gradients' accumulation and the update in the parameters' dtype); "
     "refused on a CPU without avx512_bf16 or amx_bf16, where LibTorch emulates bfloat16"},
    {"models", "multi_model: n independent Linear(256, 512) models; 1 .. 256"},
    {"iterations", "multi_model: training iterations of each variant; 1 .. 1000000"},
    {"loaders",
     "data_loading: loader processes feeding the trainer (0: it loads its own batches); 0 .. "
     "`--max-workers` - 1"},
    {"prefetch",
     "data_loading: batches in flight per loader (the ring has max(1, loaders) x prefetch "
     "slots, at most 1024); 1 .. 64"},
    {"pin_memory",
     "data_loading: page-locked batches for copies to a GPU; `yes` is refused until "
     "data_loading has a CUDA path (it runs on the CPU only)"},
    {"nodes",
     "data_parallel: nodes the experiment spans, one shoald each (see \"Several nodes\"); 1 "
     ".. 64"},
    {"node_rank", "data_parallel: this daemon's node, 0 .. nodes - 1"},
    {"master",
     "data_parallel with `--nodes` > 1 (required then, refused otherwise): HOST:PORT where "
     "node 0's worker 0 hosts the c10d store"},
    {"node_daemons",
     "data_parallel: `HOST:PORT,HOST:PORT,...`, every node's shoald (its `--listen`), node 0 "
     "first, 2 .. 64 of them; the daemon given it federates (see \"One daemon federating\"); "
     "sets `--nodes`, refuses `--node-rank`; not in sweeps"},
    {"layers",
     "pipeline: AmoebaNet-D's L, the normal cells (L / 3 per group); a multiple of 3, 3 .. 300"},
    {"filters",
     "pipeline: AmoebaNet-D's D (the seed's 208 scaled by 1 / 3.25 for a CPU); a multiple of "
     "8, 8 .. 4096"},
    {"stages",
     "pipeline: stage processes the L + 6 layers are cut into (the workers: one per stage); 1 "
     ".. L + 6"},
    {"balance",
     "pipeline: layers per stage, comma-separated, summing to L + 6 (`16,8` for L = 18, 2 "
     "stages); not an axis"},
    {"chunks", "pipeline: micro-batches per mini-batch (GPipe's m), dividing `--batch-size`"},
    {"checkpoint",
     "pipeline: never | except_last | always — which micro-batches drop their activations in "
     "forward and recompute them in backward (torchgpipe's modes)"},
    {"scaling",
     "data_parallel: weak (`--batch-size` per worker: the step grows with the workers) | "
     "strong (`--batch-size` per step, split over the workers, which must divide it)"},
    {"workers",
     "worker processes; 1 .. `--max-workers` (64); multi_model: one per variant, as many as "
     "it has; data_loading: the trainer and its loaders; pipeline: one per stage (leave it "
     "out)"},
    {"name", "a label (not empty: leave it out for none)"},
    {"force",
     "start even if the admission check says it will not fit (`--force=no` is kept as no)"},
};

}  // namespace

const std::map<std::string, std::string>& SpecFieldReference() {
  static const std::map<std::string, std::string> text(std::begin(kReference),
                                                       std::end(kReference));
  return text;
}

}  // namespace shoal
