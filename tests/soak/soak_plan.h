#pragma once
// The soak's plan: every client's turns are a pure function of (seed, client index, vocab size),
// so the client processes and the checking replay derive the same turns without sharing state.

#include <cstdint>
#include <string>
#include <vector>

#include "niels/v1/nielsd.pb.h"

namespace niels::soak {

enum class Fault {
  kNone,
  kCancel,            // send Cancel after `cancel_after_events` stream events (0: right away)
  kDisconnectSend,    // write only `fault_offset` bytes of the request frame, then close
  kDisconnectReceive, // close after reading `fault_offset` bytes of responses
};

struct TurnSpec {
  bool chat = true;                 // Chat on the client's chat session, else Generate on its raw one
  bool stream = false;
  bool use_kv_cache = true;
  bool greedy = true;               // else temperature 0.8, top_k 20, fixed seed
  uint64_t seed = 0;
  int max_new_tokens = 16;
  std::string user_text;            // Chat
  std::vector<int32_t> input_ids;   // Generate
  bool reset_before = false;        // Generate: ResetSession the raw session first
  bool reconnect_before = false;    // close and reopen the connection before this turn
  Fault fault = Fault::kNone;
  int cancel_after_events = 0;
  uint64_t fault_offset = 0;        // bytes (kDisconnectSend: < the frame's size)
};

// The turns of client `client`. `vocab` is the model's V (Generate input ids are in [4, V)).
// `faults` = false gives a plan without cancels and disconnects.
// Replies are 4..max_new_tokens tokens long (max_new_tokens >= 4).
std::vector<TurnSpec> MakePlan(uint64_t seed, int client, int turns, int32_t vocab, bool faults,
                               int max_new_tokens = 40);

// The request of a turn (session ids filled in by the caller).
niels::v1::Request MakeRequest(const TurnSpec& turn, uint64_t request_id, const std::string& session_id);

}  // namespace niels::soak
