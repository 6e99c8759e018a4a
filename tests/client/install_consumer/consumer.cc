// Uses the installed client library as any program would: Info, a session, a streamed greedy chat
// turn, cleanup. Prints "reply: TEXT" and exits 0 when the streamed tokens add up to the reply.
#include <iostream>
#include <string>

#include "client/daemon_client.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer SOCKET\n";
    return 2;
  }
  auto client = niels::client::DaemonClient::Connect(argv[1]);
  if (!client.ok()) {
    std::cerr << client.status().ToString() << "\n";
    return 2;
  }
  auto info = (*client)->Info();
  if (!info.ok()) return 1;
  std::cout << "model " << info->model_name() << " V=" << info->vocab_size() << "\n";
  auto session = (*client)->CreateSession(std::string("you are terse."));
  if (!session.ok()) return 1;
  niels::v1::ChatRequest request;
  request.set_session_id(session->session_id());
  request.set_user_text("how do i start nielsd?");
  request.mutable_sampling()->set_temperature(0);
  request.set_max_new_tokens(16);
  request.set_stream(true);
  std::string streamed;
  int tokens = 0;
  auto reply = (*client)->Chat(request, [&](const niels::v1::TokenEvent& event) {
    streamed += event.text();
    ++tokens;
  });
  if (!reply.ok()) {
    std::cerr << reply.status().ToString() << "\n";
    return 1;
  }
  std::cout << "tokens " << tokens << "\nreply: " << reply->reply() << "\n";
  if (!(*client)->DeleteSession(session->session_id()).ok()) return 1;
  return tokens > 0 && !streamed.empty() && reply->reply().starts_with(streamed) ? 0 : 1;
}
