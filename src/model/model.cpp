#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <xxhash.h>

#include "core/device_memory.h"
#include "core/error.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "io/mapped_file.h"
#include "model/decode_graphs.h"
#include "model/layers.h"
#include "model/layout.h"
#include "model/logits_output.h"
#include "model/step_message.h"
#include "model/tensor_parallel.h"

namespace hibana {

namespace {

// Seconds since `start` (start-up log lines).
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Final norm and lm_head over the chosen rows of x; logits (and hidden states) come back to
// host memory. A vocabulary-sharded lm_head gives each rank its columns, then all of them.
void project_rows(const ModelConfig& c, const Weight& lm_head, const Tensor& norm, Backend& be,
                  const Tensor& x, const std::vector<int64_t>& rows, const ForwardOptions& o,
                  const TensorParallel* tp, ForwardOutput& out) {
  const int64_t R = static_cast<int64_t>(rows.size()), H = c.hidden_size, V = c.vocab_size;
  const Device dev = be.device();
  const bool want_hidden = o.want_hidden;
  out.vocab = V;
  out.hidden = H;
  out.summaries.clear();
  out.fetch_row = nullptr;
  const bool on_host = tp || dev == Device::cpu;
  out.logits.assign(on_host ? static_cast<size_t>(R * V) : 0, 0.0f);
  if (R == 0) return;
  OwnedTensor xr = make_tensor(DType::f32, {R, H}, dev);
  // Consecutive rows (every decode step, every LogitsMode::all) move in one copy.
  for (int64_t r = 0; r < R;) {
    int64_t n = 1;
    while (r + n < R && rows[r + n] == rows[r] + n) ++n;
    copy_bytes(xr.tensor.row<float>(r), dev, x.row<float>(rows[r]), dev,
               static_cast<size_t>(n * H) * sizeof(float));
    r += n;
  }
  Tensor xv = xr.tensor;
  be.rmsnorm(xv, norm, static_cast<float>(c.rms_norm_eps), c.zero_centred_norm, xv);
  if (want_hidden) {
    out.hidden_states.resize(static_cast<size_t>(R * H));
    copy_to_host(xv, out.hidden_states.data());
  }
  if (tp) {  // on the CPU (the communicator's buffers are host memory)
    std::vector<float> part(static_cast<size_t>(R * lm_head.rows()));
    be.matmul(xv, lm_head, Tensor(part.data(), DType::f32, {R, lm_head.rows()}));
    gather_logits(*tp, part, R, out.logits.data());
    summarise_host_logits(be, o, R, out);
  } else if (dev == Device::cpu) {
    be.matmul(xv, lm_head, Tensor(out.logits.data(), DType::f32, {R, V}));
    summarise_host_logits(be, o, R, out);
  } else {
    auto logits = std::make_shared<OwnedTensor>(make_uninit_tensor(DType::f32, {R, V}, dev));
    be.matmul(xv, lm_head, logits->tensor);
    deliver_logits(be, std::move(logits), o, out);
  }
}

void check_tokens(std::span<const int32_t> tokens, int64_t vocab) {
  for (int32_t id : tokens) {
    check(id >= 0 && id < vocab, ErrorKind::invalid_argument,
          "token id " + std::to_string(id) + " is outside the vocabulary (size " +
              std::to_string(vocab) + ")");
  }
}

// Token ids as a tensor on the backend's device, checked against the vocabulary.
OwnedTensor token_tensor(const std::vector<int32_t>& tokens, int64_t vocab, Device dev) {
  check_tokens(tokens, vocab);
  OwnedTensor t = make_tensor(DType::i32, {static_cast<int64_t>(tokens.size())}, dev);
  copy_from_host(tokens.data(), t.tensor);
  return t;
}

std::vector<int64_t> logits_rows(const std::vector<LogitsMode>& modes,
                                 const std::vector<int64_t>& lengths, ForwardOutput& out) {
  std::vector<int64_t> rows;
  out.first_row.clear();
  out.row_count.clear();
  int64_t t = 0;
  for (size_t i = 0; i < modes.size(); ++i) {
    out.first_row.push_back(static_cast<int64_t>(rows.size()));
    if (modes[i] == LogitsMode::last) rows.push_back(t + lengths[i] - 1);
    if (modes[i] == LogitsMode::all)
      for (int64_t j = 0; j < lengths[i]; ++j) rows.push_back(t + j);
    out.row_count.push_back(static_cast<int64_t>(rows.size()) - out.first_row.back());
    t += lengths[i];
  }
  return rows;
}

}  // namespace

namespace {
// Hashes dtype, shape and up to 4 KiB from each end of a tensor: enough to tell checkpoints
// apart without reading hundreds of gigabytes at start-up.
void hash_tensor(XXH3_state_t* st, const Tensor& t) {
  if (t.empty()) return;
  const int64_t meta[6] = {static_cast<int64_t>(t.dtype), t.ndim, t.shape[0], t.shape[1],
                           t.shape[2], t.shape[3]};
  XXH3_64bits_update(st, meta, sizeof meta);
  const size_t n = t.nbytes(), edge = std::min<size_t>(n, 4096);
  XXH3_64bits_update(st, t.data, edge);
  XXH3_64bits_update(st, static_cast<const char*>(t.data) + (n - edge), edge);
}

uint64_t weights_fingerprint(const ModelConfig& c, const ModelWeights& w) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const int64_t shape[8] = {static_cast<int64_t>(c.arch), c.vocab_size, c.hidden_size,
                            c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim};
  XXH3_64bits_update(st, shape, sizeof shape);
  // Settings that change the state the same weights compute from the same tokens: the same
  // checkpoint under another RoPE base, norm epsilon or experts per token is another model.
  const double reals[] = {c.rope_theta, c.rms_norm_eps};
  XXH3_64bits_update(st, reals, sizeof reals);
  const int64_t settings[] = {c.intermediate_size,
                              c.zero_centred_norm,
                              c.attention_bias,
                              c.attention_output_gate,
                              c.linear_key_heads,
                              c.linear_value_heads,
                              c.linear_key_dim,
                              c.linear_value_dim,
                              c.linear_conv_kernel,
                              c.num_experts,
                              c.experts_per_token,
                              c.moe_intermediate_size,
                              c.shared_expert_intermediate_size,
                              c.norm_topk_prob,
                              c.mtp_layers,
                              c.fp8_block_rows,
                              c.fp8_block_cols};
  XXH3_64bits_update(st, settings, sizeof settings);
  for (MixerKind m : c.mixers) XXH3_64bits_update(st, &m, sizeof m);
  for (FfnKind f : c.ffns) XXH3_64bits_update(st, &f, sizeof f);
  auto layer = [&](const LayerWeights& l) {
    for_each_matrix(l, [&](const Weight& m, MatrixRole) {
      hash_tensor(st, m.w);
      hash_tensor(st, m.scale);
    });
    for (const Tensor* t : {&l.input_norm, &l.post_norm, &l.attn.q_norm, &l.attn.k_norm,
                            &l.gdn.conv, &l.gdn.A_log, &l.gdn.dt_bias, &l.gdn.norm}) {
      hash_tensor(st, *t);
    }
  };
  hash_tensor(st, w.embed.w);
  hash_tensor(st, w.lm_head.w);
  hash_tensor(st, w.final_norm);
  for (const LayerWeights& l : w.layers) layer(l);
  if (w.mtp) {  // its layer's KV is part of the state too
    hash_tensor(st, w.mtp->fc.w);
    hash_tensor(st, w.mtp->fc.scale);
    for (const Tensor* t :
         {&w.mtp->pre_fc_norm_embedding, &w.mtp->pre_fc_norm_hidden, &w.mtp->norm}) {
      hash_tensor(st, *t);
    }
    layer(w.mtp->layer);
  }
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}
}  // namespace

Model::Model(ModelConfig config, ModelWeights weights, std::shared_ptr<Backend> backend,
             std::optional<Shard> shard)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(std::move(backend)) {
  if (shard && shard->plan.ranks > 1) {
    check(shard->comm->device() == backend_->device(), ErrorKind::unsupported,
          "tensor parallelism on " + backend_->name() +
              " needs a communicator on its device (NCCL for --device cuda, MPI for cpu)");
    tp_ = std::make_unique<TensorParallel>(config_, std::move(*shard));
  }
  // The fingerprint first: it must not depend on the layout the device gets below.
  fingerprint_ = weights_fingerprint(config_, weights_);
  // On a GPU the packed projections' column maps are folded into their weight rows (one
  // stacked matmul per DeltaNet layer, no gathers). On the CPU the rows stay where the
  // checkpoint has them (mapped, not copied into the heap) and the layers gather the columns.
  if (backend_->device() != Device::cpu) unpack_projections(weights_);
  if (tp_) {  // a shard's state is another model's: never restored by another rank or --tp
    const uint64_t shard[3] = {fingerprint_, static_cast<uint64_t>(tp_->plan.rank),
                               static_cast<uint64_t>(tp_->plan.ranks)};
    fingerprint_ = XXH3_64bits(shard, sizeof shard);
  }
  if (backend_->device() != Device::cpu) {
    log_info("copying ", weights_.matrix_bytes >> 20, " MiB of weights to ", backend_->name());
    const auto start = std::chrono::steady_clock::now();
    move_weights(weights_, backend_->device());
    const double s = seconds_since(start);
    log_info("weights copied in ", s, " s (",
             static_cast<double>(weights_.matrix_bytes) / 1e9 / std::max(s, 1e-9), " GB/s)");
  }
  fold_shared_experts(weights_);
  if (backend_->can_capture()) {
    graphs_ = std::make_unique<DecodeGraphs>(*backend_, config_.vocab_size,
                                             config_.num_attention_layers() > 0,
                                             config_.has_deltanet());
  }
}

Model::~Model() {
  if (tp_ && tp_->leader()) {
    try {
      release_followers();
    } catch (const std::exception& e) {
      log_error("could not release the other ranks: ", e.what());
    }
  }
}

int64_t Model::decode_graph_replays() const { return graphs_ ? graphs_->replays() : 0; }

int Model::rank() const {
  return tp_ ? tp_->comm->rank() : 0;
}
int Model::ranks() const {
  return tp_ ? tp_->comm->size() : 1;
}
const ShardPlan* Model::shard_plan() const {
  return tp_ ? &tp_->plan : nullptr;
}
const ModelConfig& Model::layer_config() const {
  return tp_ ? tp_->local : config_;
}
Communicator* Model::layer_comm() const {
  return tp_ ? tp_->comm.get() : nullptr;
}

namespace {
// The shard of this process when `comm` has more than one rank (validated against the config
// before any weight is read); `fp8` says whether matrices are converted to fp8 at load, `ep`
// whether each rank holds whole experts (expert parallelism).
std::optional<Shard> make_shard(const ModelConfig& c, const std::shared_ptr<Communicator>& comm,
                                bool fp8, bool ep) {
  if (!comm || comm->size() == 1) return std::nullopt;
  return Shard{comm, make_shard_plan(c, comm->rank(), comm->size(), scale_block(c, fp8), ep)};
}
}  // namespace

std::unique_ptr<Model> Model::load(const std::string& model, std::shared_ptr<Backend> backend,
                                   const LoadOptions& options) {
  std::string dir = resolve_model_dir(model);
  auto ck = std::make_shared<Checkpoint>(dir);
  ModelConfig config = parse_model_config(ck->config_text(), dir + "/config.json");
  if (ck->generation_config_text()) {
    apply_generation_config(config, *ck->generation_config_text(),
                            dir + "/generation_config.json");
  }
  size_t ignored = 0;
  for (const std::string& n : ck->tensor_names()) ignored += n.rfind("model.visual.", 0) == 0;
  if (ignored) log_info("ignoring ", ignored, " vision-tower tensors (model.visual.*)");
  std::optional<Shard> shard =
      make_shard(config, options.comm, options.fp8, options.expert_parallel);
  ModelWeights weights = load_weights(config, ck, options);
  if (shard) shard_weights(weights, config, shard->plan);
  auto m = std::make_unique<Model>(std::move(config), std::move(weights), std::move(backend),
                                   std::move(shard));
  m->source_ = dir;
  return m;
}

std::unique_ptr<Model> Model::dummy(const std::string& config_path, DType dtype,
                                    std::shared_ptr<Backend> backend, uint64_t seed,
                                    std::shared_ptr<Communicator> comm, bool expert_parallel) {
  ModelConfig config = parse_model_config(read_text_file(config_path), config_path);
  // Every rank makes the same whole model and keeps its part.
  std::optional<Shard> shard = make_shard(config, comm, dtype == DType::f8_e4m3, expert_parallel);
  // Bound for a device: pooled host values (no host memory of the model's size to fill).
  const auto start = std::chrono::steady_clock::now();
  ModelWeights weights =
      make_dummy_weights(config, dtype, seed, true, backend->device() != Device::cpu);
  log_info("dummy weights made in ", seconds_since(start), " s");
  if (shard) shard_weights(weights, config, shard->plan);
  auto m = std::make_unique<Model>(std::move(config), std::move(weights), std::move(backend),
                                   std::move(shard));
  m->source_ = "dummy:" + config_path;
  return m;
}

StateSpec Model::state_spec() const {
  StateSpec s;
  s.device = backend_->device();
  const ModelConfig& c = layer_config();
  s.attention_layers = c.num_attention_layers() + (has_mtp() ? 1 : 0);
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.deltanet_layers = c.num_deltanet_layers();
  if (s.deltanet_layers > 0) {
    s.conv_channels = c.gdn_conv_dim();
    s.conv_window = c.linear_conv_kernel - 1;
    s.value_heads = c.linear_value_heads;
    s.key_dim = c.linear_key_dim;
    s.value_dim = c.linear_value_dim;
  }
  return s;
}

namespace {
// Rank 0 of a tensor-parallel model, before it announces a pass: the ranks are out of step
// until the pass is through (then `broken` is cleared).
void begin_leading_pass(const TensorParallel& tp) {
  check(tp.leader() && !tp.released, ErrorKind::internal,
        "only rank 0 runs passes of a tensor-parallel model, until it releases the others");
  tp.broken = true;
}

// Rank 0, when a pass fails after the other ranks heard of it: they wait in a collective that
// will not come, so no rank can go on.
[[noreturn]] void end_ranks_after(const TensorParallel& tp, const std::exception& e) {
  log_error("rank 0: a tensor-parallel pass failed part-way (", e.what(), "); ending every rank");
  tp.comm->abort(1);
}

void copy_slot_locally(Backend& be, const StateViews& state, int32_t from, int32_t to) {
  for (size_t l = 0; l < state.conv.size(); ++l) {
    be.copy_slot(state.conv[l], from, to);
    be.copy_slot(state.ssm[l], from, to);
  }
}
}  // namespace

void BackendStateOps::copy_recurrent_slot(const StateViews& state, int32_t from,
                                          int32_t to) const {
  copy_slot_locally(backend_, state, from, to);
}

void Model::copy_recurrent_slot(const StateViews& state, int32_t from, int32_t to) const {
  if (!tp_) return copy_slot_locally(*backend_, state, from, to);
  begin_leading_pass(*tp_);
  send_copy_slot(*tp_->comm, state, from, to);
  try {
    copy_slot_locally(*backend_, state, from, to);
  } catch (const std::exception& e) {
    end_ranks_after(*tp_, e);
  }
  tp_->broken = false;
}

namespace {
// This rank's part of a block move: a failure (an exception included) is a `false` the ranks
// agree on, never a reason to leave the others waiting.
bool move_here(BlockMover* mover, const BlockMove& m, const StateViews& state) {
  if (!mover) return false;
  try {
    return mover->move(m, state);
  } catch (const std::exception& e) {
    log_warn("a state block move failed on this rank: ", e.what());
    return false;
  }
}
}  // namespace

bool Model::move_block(const StateViews& state, BlockMover& mover, const BlockMove& m) const {
  if (!tp_) return mover.move(m, state);
  begin_leading_pass(*tp_);
  send_block_move(*tp_->comm, state, m);
  const bool ok = agree_on(*tp_->comm, move_here(&mover, m, state));
  tp_->broken = false;
  return ok;
}

void Model::forward(std::span<const SequenceInput> seqs, const StateViews& state,
                    const ForwardOptions& options, ForwardOutput& out) const {
  check(!seqs.empty(), ErrorKind::invalid_argument, "forward: empty batch");
  if (tp_) {
    // Checked before the other ranks hear of the pass, so a bad id fails only here.
    for (const SequenceInput& s : seqs) check_tokens(s.tokens, config_.vocab_size);
    begin_leading_pass(*tp_);
    send_step(*tp_->comm, seqs, options, state);
    try {
      forward_pass(seqs, state, options, out);
    } catch (const std::exception& e) {
      end_ranks_after(*tp_, e);
    }
    tp_->broken = false;
    return;
  }
  Backend& be = *backend_;
  const Device dev = be.device();
  const int64_t H = config_.hidden_size;
  if (graphs_) {  // decode steps: recorded once per batch bucket, then replayed
    auto step = [&](const Tensor& ids, const BatchLayout& layout, Tensor logits) {
      OwnedTensor x = make_uninit_tensor(DType::f32, {layout.num_tokens, H}, dev);
      be.embedding(weights_.embed, ids, x.tensor);
      layers::decoder_layers(config_, weights_.layers, be, x.tensor, layout, state);
      be.rmsnorm(x.tensor, weights_.final_norm, static_cast<float>(config_.rms_norm_eps),
                 config_.zero_centred_norm, x.tensor);
      be.matmul(x.tensor, weights_.lm_head, logits);
    };
    if (graphs_->run(seqs, state, options, step, out)) {
      out.hidden = H;
      return;
    }
  }
  forward_pass(seqs, state, options, out);
}

void Model::embed(const std::vector<int32_t>& tokens, Tensor out) const {
  if (tp_) {
    check_tokens(tokens, config_.vocab_size);
    embed_rows(*tp_, *backend_, weights_.embed, tokens, out);
  } else {
    OwnedTensor ids = token_tensor(tokens, config_.vocab_size, backend_->device());
    backend_->embedding(weights_.embed, ids.tensor, out);
  }
}

void Model::forward_pass(std::span<const SequenceInput> seqs, const StateViews& state,
                         const ForwardOptions& options, ForwardOutput& out) const {
  Backend& be = *backend_;
  const Device dev = be.device();
  const int64_t H = config_.hidden_size;
  std::vector<SeqDesc> desc;
  std::vector<LogitsMode> modes;
  std::vector<int64_t> lengths;
  std::vector<int32_t> tokens;
  for (const SequenceInput& s : seqs) {
    desc.push_back({static_cast<int64_t>(s.tokens.size()), s.start_pos, s.pages, s.slot,
                    s.snapshot_slots});
    modes.push_back(s.logits);
    lengths.push_back(static_cast<int64_t>(s.tokens.size()));
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
  }
  const bool needs_pages = config_.num_attention_layers() > 0;
  LayoutStorage ls = build_layout(desc, state, needs_pages, config_.has_deltanet(), options.gdn_mode);
  const int64_t T = ls.layout.num_tokens;
  ls.to_device(dev);

  OwnedTensor x = make_tensor(DType::f32, {T, H}, dev);
  embed(tokens, x.tensor);
  {
    const ScopedPrefillRows prefill(be, desc, options.gdn_mode);
    layers::decoder_layers(layer_config(), weights_.layers, be, x.tensor, ls.layout, state,
                           layer_comm());
  }
  std::vector<int64_t> rows = logits_rows(modes, lengths, out);
  project_rows(config_, weights_.lm_head, weights_.final_norm, be, x.tensor, rows, options,
               tp_.get(), out);
}

void Model::follow(const std::function<const StateViews&(const StateGeometry&)>& state,
                   BlockMover* mover) const {
  check(tp_ && !tp_->leader(), ErrorKind::internal, "follow() is for the ranks other than 0");
  ReceivedStep step;
  ForwardOutput out;
  while (receive_step(*tp_->comm, step)) {
    const StateViews& views = state(step.geometry);
    if (step.copy) {
      copy_slot_locally(*backend_, views, step.copy_from, step.copy_to);
      continue;
    }
    if (step.block_move) {
      agree_on(*tp_->comm, move_here(mover, step.move, views));
      continue;
    }
    for (const SequenceInput& s : step.seqs) {
      if (s.start_pos == 0 && s.slot >= 0) clear_recurrent_slot(views, s.slot);
    }
    if (step.mtp) {
      mtp_pass(step.mtp_seqs, views, out);
    } else {
      forward_pass(step.seqs, views, step.options, out);
    }
  }
}

bool Model::release_followers() const {
  if (!tp_ || !tp_->leader() || tp_->released) return true;
  if (tp_->broken) return false;  // a stop message could meet a collective
  send_stop(*tp_->comm);
  tp_->released = true;
  return true;
}

void Model::forward_mtp(std::span<const MtpInput> seqs, const StateViews& state,
                        ForwardOutput& out) const {
  check(has_mtp(), ErrorKind::unsupported, "this model has no MTP head");
  check(!seqs.empty(), ErrorKind::invalid_argument, "forward_mtp: empty batch");
  const int64_t H = config_.hidden_size;
  for (const MtpInput& s : seqs) {  // before the other ranks hear of the pass
    check(static_cast<int64_t>(s.hidden.size()) == static_cast<int64_t>(s.next_tokens.size()) * H,
          ErrorKind::invalid_argument, "forward_mtp: hidden must hold one row per token");
    check_tokens(s.next_tokens, config_.vocab_size);
  }
  if (!tp_) return mtp_pass(seqs, state, out);
  begin_leading_pass(*tp_);
  send_mtp_step(*tp_->comm, seqs, state);
  try {
    mtp_pass(seqs, state, out);
  } catch (const std::exception& e) {
    end_ranks_after(*tp_, e);
  }
  tp_->broken = false;
}

void Model::mtp_pass(std::span<const MtpInput> seqs, const StateViews& state,
                     ForwardOutput& out) const {
  const MtpWeights& m = *weights_.mtp;
  const int64_t H = config_.hidden_size;
  std::vector<SeqDesc> desc;
  std::vector<LogitsMode> modes;
  std::vector<int64_t> lengths;
  std::vector<int32_t> tokens;
  std::vector<float> hidden;
  for (const MtpInput& s : seqs) {
    const int64_t n = static_cast<int64_t>(s.next_tokens.size());
    desc.push_back({n, s.start_pos, s.pages, -1, {}});
    modes.push_back(s.logits);
    lengths.push_back(n);
    tokens.insert(tokens.end(), s.next_tokens.begin(), s.next_tokens.end());
    hidden.insert(hidden.end(), s.hidden.begin(), s.hidden.end());
  }
  LayoutStorage ls = build_layout(desc, state, true, false, GdnMode::recurrent);
  const int64_t T = ls.layout.num_tokens;
  Backend& be = *backend_;
  const Device dev = be.device();
  ls.to_device(dev);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const bool zc = config_.zero_centred_norm;

  // fc([norm_e(embed(x_{p+1})) ; norm_h(h_p)]); fc and the norms are whole on every rank.
  OwnedTensor cat = make_tensor(DType::f32, {T, 2 * H}, dev);
  Tensor e = cat.tensor, h = cat.tensor;
  e.shape[1] = H;
  h.shape[1] = H;
  h.data = cat.tensor.ptr<float>() + H;
  embed(tokens, e);
  be.rmsnorm(e, m.pre_fc_norm_embedding, eps, zc, e);
  OwnedTensor hid = make_tensor(DType::f32, {T, H}, dev);
  copy_from_host(hidden.data(), hid.tensor);
  be.add(h, hid.tensor);  // h is zero: cat was cleared when made
  be.rmsnorm(h, m.pre_fc_norm_hidden, eps, zc, h);
  OwnedTensor x = make_tensor(DType::f32, {T, H}, dev);
  be.matmul(cat.tensor, m.fc, x.tensor);
  layers::decoder_layer(layer_config(), m.layer, be, x.tensor, ls.layout, state, layer_comm());
  std::vector<int64_t> rows = logits_rows(modes, lengths, out);
  ForwardOptions mtp_rows;
  mtp_rows.want_hidden = true;
  project_rows(config_, weights_.lm_head, m.norm, be, x.tensor, rows, mtp_rows, tp_.get(), out);
}

}  // namespace hibana
