#include "tests/soak/soak_plan.h"

#include <array>
#include <random>

namespace niels::soak {
namespace {

constexpr std::array<const char*, 12> kQuestions = {
    "what is nielsd?",
    "how do i start nielsd?",
    "what does --no-kv-cache do?",
    "who wrote niels?",
    "how do i chat with it?",
    "what is a session?",
    "can i stream tokens?",
    "what port does it use?",
    "tell me about the kv cache",
    "how do i stop it",
    "what model does it ship with?",
    "thanks!",
};

}  // namespace

std::vector<TurnSpec> MakePlan(uint64_t seed, int client, int turns, int32_t vocab, bool faults,
                               int max_new_tokens) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(client));
  auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  std::vector<TurnSpec> plan;
  int generates = 0;
  for (int i = 0; i < turns; ++i) {
    TurnSpec t;
    t.chat = chance(70);
    t.stream = chance(50);
    t.use_kv_cache = chance(80);
    t.greedy = chance(70);
    t.seed = rng();
    t.max_new_tokens = 4 + static_cast<int>(rng() % (max_new_tokens - 3));
    if (t.chat) {
      t.user_text = kQuestions[rng() % kQuestions.size()];
      if (chance(30)) t.user_text += " (client " + std::to_string(client) + ", turn " + std::to_string(i) + ")";
    } else {
      t.reset_before = generates % 3 == 0;
      ++generates;
      const int n = 1 + static_cast<int>(rng() % 20);
      for (int k = 0; k < n; ++k) t.input_ids.push_back(4 + static_cast<int32_t>(rng() % (vocab - 4)));
    }
    t.reconnect_before = chance(15);
    if (faults) {
      const int roll = static_cast<int>(rng() % 100);
      if (roll < 12) {
        t.fault = Fault::kCancel;
        t.cancel_after_events = static_cast<int>(rng() % 6);
      } else if (roll < 18) {
        t.fault = Fault::kDisconnectSend;
        t.fault_offset = rng();  // reduced modulo the frame size when sending
      } else if (roll < 25) {
        t.fault = Fault::kDisconnectReceive;
        t.fault_offset = rng() % 400;
      }
    }
    plan.push_back(std::move(t));
  }
  return plan;
}

niels::v1::Request MakeRequest(const TurnSpec& turn, uint64_t request_id, const std::string& session_id) {
  niels::v1::Request request;
  request.set_request_id(request_id);
  niels::v1::Sampling* sampling;
  if (turn.chat) {
    auto* chat = request.mutable_chat();
    chat->set_session_id(session_id);
    chat->set_user_text(turn.user_text);
    chat->set_max_new_tokens(turn.max_new_tokens);
    chat->set_use_kv_cache(turn.use_kv_cache);
    chat->set_stream(turn.stream);
    sampling = chat->mutable_sampling();
  } else {
    auto* generate = request.mutable_generate();
    generate->set_session_id(session_id);
    for (int32_t id : turn.input_ids) generate->add_input_ids(id);
    generate->set_max_new_tokens(turn.max_new_tokens);
    generate->set_use_kv_cache(turn.use_kv_cache);
    generate->set_stream(turn.stream);
    sampling = generate->mutable_sampling();
  }
  if (turn.greedy) {
    sampling->set_temperature(0.0f);
  } else {
    sampling->set_temperature(0.8f);
    sampling->set_top_k(20);
  }
  sampling->set_seed(turn.seed);
  return request;
}

}  // namespace niels::soak
