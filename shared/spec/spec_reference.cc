// The spec options' reference text (docs/cli-reference.md): for each field of the spec field
// table, what it is, its allowed values and ranges, and what is refused. --help says the short
// form (SpecField::help); tests/cli_reference_test.cc checks that every field has its text here
// (a kind's own fields: in its rules, KindRules::references).
#include <iterator>
#include <map>
#include <utility>

#include "shared/kinds/kind.h"
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
     "hogwild on cuda: `events` (the default) records a CUDA event between phases (data, "
     "forward, backward, update) and reads their times once the step's loss is read, so the "
     "split is the device's time for each phase and the host waits once a step; `phases` waits "
     "for the device before each phase time is read, so the split is the work done but the "
     "device idles while the host queues the next phase; `step` waits once a step, when its "
     "loss is read (as a PyTorch loop that logs its loss does), and the phase split is absent. "
     "Refused on the CPU and by the other kinds. An axis (`--cuda-sync events,phases,step` "
     "compares them)"},
    {"nodes",
     "data_parallel and command: nodes the run spans, 1 .. 64, a part each running the same "
     "spec (torchrun's `--nnodes`); on Slurm one job of that many nodes, srun placing the parts "
     "(\"[A run across nodes as one Slurm job](cluster.md)\"); by hand, each node's daemon given "
     "its part. The other kinds refuse it"},
    {"node_rank",
     "data_parallel and command: this node's part, 0 .. nodes - 1 (its workers are global ranks "
     "node_rank x workers ..); on Slurm each node's place in the allocation, and one given is "
     "refused"},
    {"master",
     "data_parallel and command with `--nodes` > 1 (required then, refused otherwise): "
     "HOST:PORT where node 0's worker 0 hosts the c10d store (a command's `MASTER_ADDR` and "
     "`MASTER_PORT`); on Slurm the allocation's first node, and one given is refused"},
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
     "(0: off); 0 (off) or 500 .. 86400000. Not given: 600000 until a worker has moved twice "
     "(a hang in the first step), then 100x the slowest interval between one worker's two "
     "progress marks seen so far, 30 s .. 1800000 (a step that hangs fails the run in minutes); "
     "with a model file: 100x the "
     "leader's probe step x the cores' oversubscription, 5 s .. 1800000, which bounds each "
     "worker's warm-up too (docs/your-model.md, \"Bounds\")"},
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
    {"workers",
     "worker processes; 1 .. `--max-workers` (64); multi_model: one per variant, as many as "
     "it has; data_loading: the trainer and its loaders; pipeline: one per stage (leave it "
     "out)"},
    {"name", "a label (not empty: leave it out for none)"},
    {"force",
     "start even if the admission check says it will not fit (`--force=no` is kept as no)"},
};

// The common fields' texts here, each kind's from its rules (KindRules::references).
std::map<std::string, std::string> MakeReference() {
  std::map<std::string, std::string> all(std::begin(kReference), std::end(kReference));
  for (const KindRules& k : AllKinds()) all.insert(k.references.begin(), k.references.end());
  return all;
}

}  // namespace

const std::map<std::string, std::string>& SpecFieldReference() {
  return MadeFromRegistry<std::map<std::string, std::string>, MakeReference>();
}

}  // namespace shoal
