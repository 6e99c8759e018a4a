#include "daemon/handlers/method_table.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

namespace {

const std::string& NoSession(const v1::Request&) {
  static const std::string kNone;
  return kNone;
}

// Adapters from the typed handlers to the table's uniform signatures.
#define NIELS_QUICK(Handler, field)                                                              \
  [](engine::EngineState& state, server::Job& job, const v1::Request& request) -> HandlerResult { \
    return Handler(state, job, request.field());                                                \
  }
#define NIELS_GENERATING(Handler, field)                                                              \
  [](engine::EngineState& state, const engine::Work& work, server::Job& job, const v1::Request& request, \
     const Prepared& prepared) -> engine::TurnResult { return Handler(state, work, job, request.field(), prepared); }
#define NIELS_PREPARE(Prepare, field)                                                              \
  [](const v1::Request& request, const PrepareContext& context,                                     \
     const CompileCancelled& cancelled) -> common::StatusOr<Prepared> {                             \
    return Prepare(request.field(), context, cancelled);                                            \
  }
#define NIELS_COMPILES(Compiles, field) [](const v1::Request& request) { return Compiles(request.field()); }
#define NIELS_SESSION(field) \
  [](const v1::Request& request) -> const std::string& { return request.field().session_id(); }

const Method kInfo{"Info", NoSession, NIELS_QUICK(HandleInfo, info), nullptr, nullptr, nullptr, nullptr};
const Method kStats{"Stats", NoSession, NIELS_QUICK(HandleStats, stats), nullptr, nullptr, nullptr, nullptr};
const Method kTokenize{"Tokenize", NoSession, NIELS_QUICK(HandleTokenize, tokenize), nullptr, nullptr, nullptr, nullptr};
const Method kDetokenize{"Detokenize", NoSession, NIELS_QUICK(HandleDetokenize, detokenize), nullptr, nullptr,
                         nullptr, nullptr};
const Method kCreateSession{"CreateSession", NoSession, NIELS_QUICK(HandleCreateSession, create_session),
                            nullptr, nullptr, nullptr, nullptr};
// With a system prompt: its prefill runs as a turn of the scheduler (create_session.cc); tools are
// compiled first, on the compile worker.
const Method kCreateSessionWithPrompt{"CreateSession", NoSession, nullptr,
                                      NIELS_GENERATING(StartCreateSession, create_session),
                                      NIELS_PREPARE(PrepareCreateSession, create_session),
                                      NIELS_COMPILES(CreateSessionCompiles, create_session), nullptr};
const Method kListSessions{"ListSessions", NoSession, NIELS_QUICK(HandleListSessions, list_sessions), nullptr,
                           nullptr, nullptr, nullptr};
const Method kGetSession{"GetSession", NIELS_SESSION(get_session), NIELS_QUICK(HandleGetSession, get_session),
                         nullptr, nullptr, nullptr, nullptr};
const Method kForkSession{"ForkSession", NIELS_SESSION(fork_session),
                          NIELS_QUICK(HandleForkSession, fork_session), nullptr, nullptr, nullptr, nullptr};
const Method kResetSession{"ResetSession", NIELS_SESSION(reset_session),
                           NIELS_QUICK(HandleResetSession, reset_session), nullptr, nullptr, nullptr, nullptr};
const Method kRewindSession{"RewindSession", NIELS_SESSION(rewind_session),
                            NIELS_QUICK(HandleRewindSession, rewind_session), nullptr, nullptr, nullptr, nullptr};
const Method kDeleteSession{"DeleteSession", NIELS_SESSION(delete_session),
                            NIELS_QUICK(HandleDeleteSession, delete_session), nullptr, nullptr, nullptr, nullptr};
const Method kChat{"Chat", NIELS_SESSION(chat), nullptr, NIELS_GENERATING(StartChat, chat),
                   NIELS_PREPARE(PrepareChat, chat), NIELS_COMPILES(ChatCompiles, chat), nullptr};
const Method kGenerate{"Generate", NIELS_SESSION(generate), nullptr, NIELS_GENERATING(StartGenerate, generate),
                       NIELS_PREPARE(PrepareGenerate, generate), NIELS_COMPILES(GenerateCompiles, generate), nullptr};

// Answered on the compile worker, off the engine thread (weights are immutable).
const Method kWeightStats{"WeightStats", NoSession, nullptr, nullptr, nullptr, nullptr,
                          [](const BackgroundContext& context, const v1::Request& request,
                             const CompileCancelled& cancelled) -> HandlerResult {
                            return HandleWeightStats(context, request.weight_stats(), cancelled);
                          }};

#undef NIELS_QUICK
#undef NIELS_GENERATING
#undef NIELS_SESSION
#undef NIELS_PREPARE
#undef NIELS_COMPILES

}  // namespace

const Method* FindMethod(const v1::Request& request) {
  switch (request.kind_case()) {
    case v1::Request::kInfo: return &kInfo;
    case v1::Request::kCreateSession:
      // A prompt to prefill, or tools to compile: the generating path; otherwise the quick one.
      return request.create_session().tools().tools_size() > 0 ||
                     (request.create_session().has_system_prompt() && !request.create_session().defer_prefill())
                 ? &kCreateSessionWithPrompt
                 : &kCreateSession;
    case v1::Request::kChat: return &kChat;
    case v1::Request::kGenerate: return &kGenerate;
    case v1::Request::kTokenize: return &kTokenize;
    case v1::Request::kDetokenize: return &kDetokenize;
    case v1::Request::kGetSession: return &kGetSession;
    case v1::Request::kListSessions: return &kListSessions;
    case v1::Request::kForkSession: return &kForkSession;
    case v1::Request::kResetSession: return &kResetSession;
    case v1::Request::kRewindSession: return &kRewindSession;
    case v1::Request::kDeleteSession: return &kDeleteSession;
    case v1::Request::kStats: return &kStats;
    case v1::Request::kWeightStats: return &kWeightStats;
    case v1::Request::kCancel:
    case v1::Request::KIND_NOT_SET: break;
  }
  return nullptr;
}

}  // namespace niels::daemon::handlers
