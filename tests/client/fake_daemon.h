#pragma once
// FakeDaemon: a scripted stand-in for nielsd in client tests. It listens on a Unix socket in a
// fresh temp dir, accepts ONE connection on its own thread, records every Request and answers
// each with whatever the script returns (responses, raw bytes, or closing the connection).

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>

#include "common/frame.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::client::testing_support {

struct FakeReply {
  std::vector<niels::v1::Response> responses;  // written in order, each as one frame
  std::string raw;                             // bytes written after the responses
  bool close = false;                          // close the connection afterwards
};

inline FakeReply Send(std::vector<niels::v1::Response> responses, bool close = false) {
  FakeReply reply;
  reply.responses = std::move(responses);
  reply.close = close;
  return reply;
}

inline FakeReply SendRaw(std::string raw) {
  FakeReply reply;
  reply.raw = std::move(raw);
  return reply;
}

class FakeDaemon {
 public:
  using Script = std::function<FakeReply(const niels::v1::Request&)>;

  explicit FakeDaemon(Script script) : script_(std::move(script)) {
    char tmpl[] = "/tmp/niels-client-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    path_ = dir_ + "/nielsd.sock";
    acceptor_.open(boost::asio::local::stream_protocol());
    acceptor_.bind(boost::asio::local::stream_protocol::endpoint(path_));
    acceptor_.listen();
    thread_ = std::thread([this] { Serve(); });
  }

  ~FakeDaemon() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes a blocked accept
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (connection_.is_open()) ::shutdown(connection_.native_handle(), SHUT_RDWR);
    }
    thread_.join();
    std::filesystem::remove_all(dir_);
  }

  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

  std::vector<niels::v1::Request> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }

  static niels::v1::Response Reply(uint64_t id) {
    niels::v1::Response r;
    r.set_request_id(id);
    return r;
  }

 private:
  void Serve() {
    boost::system::error_code ec;
    boost::asio::local::stream_protocol::socket socket(io_);
    acceptor_.accept(socket, ec);
    if (ec) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      connection_ = std::move(socket);
    }
    common::FrameDecoder decoder;
    char buffer[4096];
    while (true) {
      const size_t n = connection_.read_some(boost::asio::buffer(buffer), ec);
      if (ec) break;
      decoder.Feed(std::string_view(buffer, n));
      std::string payload;
      while (decoder.Next(&payload) == common::FrameDecoder::Result::kFrame) {
        niels::v1::Request request;
        if (!common::ParseFrame(payload, &request).ok()) return;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          requests_.push_back(request);
        }
        FakeReply reply = script_(request);
        std::string out;
        for (const auto& response : reply.responses) out += common::EncodeFrame(response);
        out += reply.raw;
        boost::asio::write(connection_, boost::asio::buffer(out), ec);
        if (ec || reply.close) {
          std::lock_guard<std::mutex> lock(mutex_);
          connection_.close(ec);
          return;
        }
      }
    }
  }

  Script script_;
  std::string dir_;
  std::string path_;
  boost::asio::io_context io_;
  boost::asio::local::stream_protocol::acceptor acceptor_{io_};
  boost::asio::local::stream_protocol::socket connection_{io_};
  mutable std::mutex mutex_;
  std::vector<niels::v1::Request> requests_;
  std::thread thread_;
};

}  // namespace niels::client::testing_support
