// Listener: socket file mode, parent directory creation, stale socket replacement, refusal of a
// live daemon's socket, and removal of the socket file.
#include "daemon/server/listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "tests/daemon/server/server_fixture.h"

namespace niels::daemon::server::testing {
namespace {

ListenerOptions Options(const std::filesystem::path& path) {
  ListenerOptions options;
  options.socket_path = path.string();
  options.allow_socket_activation = false;
  return options;
}

mode_t ModeOf(const std::filesystem::path& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(ListenerTest, BindsWithMode0600AndRemovesTheFileOnClose) {
  ScopedTempDir dir;
  boost::asio::io_context io;
  auto path = dir.path() / "a.sock";
  auto listener = Listener::Open(io.get_executor(), Options(path));
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  EXPECT_TRUE(std::filesystem::is_socket(path));
  EXPECT_EQ(ModeOf(path), 0600u);
  (*listener)->Close();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ListenerTest, CreatesAMissingParentDirectoryWithMode0700) {
  ScopedTempDir dir;
  boost::asio::io_context io;
  auto path = dir.path() / "run" / "nielsd" / "nielsd.sock";
  auto listener = Listener::Open(io.get_executor(), Options(path));
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  EXPECT_EQ(ModeOf(path.parent_path()), 0700u);
}

TEST(ListenerTest, GroupModeIs0660) {
  ScopedTempDir dir;
  boost::asio::io_context io;
  auto path = dir.path() / "g.sock";
  ListenerOptions options = Options(path);
  options.socket_group = "root";
  auto listener = Listener::Open(io.get_executor(), options);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  EXPECT_EQ(ModeOf(path), 0660u);
  auto unknown = Listener::Open(io.get_executor(), [&] {
    ListenerOptions o = Options(dir.path() / "u.sock");
    o.socket_group = "no-such-group-nielsd";
    return o;
  }());
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "u.sock"));
}

TEST(ListenerTest, ReplacesAStaleSocketFile) {
  ScopedTempDir dir;
  auto path = dir.path() / "stale.sock";
  {  // A socket file left behind by a dead process: bound, then closed without unlink.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ::close(fd);
  }
  ASSERT_TRUE(std::filesystem::is_socket(path));
  boost::asio::io_context io;
  auto listener = Listener::Open(io.get_executor(), Options(path));
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  RawClient client(path.string());
  EXPECT_TRUE(client.connected());
}

TEST(ListenerTest, RefusesALiveSocketAndLeavesItAlone) {
  ScopedTempDir dir;
  auto path = dir.path() / "live.sock";
  boost::asio::io_context io;
  auto first = Listener::Open(io.get_executor(), Options(path));
  ASSERT_TRUE(first.ok());
  auto second = Listener::Open(io.get_executor(), Options(path));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), common::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("another nielsd is already listening on " + path.string()),
            std::string::npos)
      << second.status().message();
  RawClient client(path.string());
  EXPECT_TRUE(client.connected());  // the first listener still owns the path
}

TEST(ListenerTest, RefusesAPathThatIsNotASocket) {
  ScopedTempDir dir;
  auto path = dir.path() / "file";
  { std::ofstream(path) << "not a socket"; }
  boost::asio::io_context io;
  auto listener = Listener::Open(io.get_executor(), Options(path));
  ASSERT_FALSE(listener.ok());
  EXPECT_EQ(listener.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_regular_file(path));
}

TEST(ListenerTest, CloseLeavesASuccessorsSocketAlone) {
  ScopedTempDir dir;
  auto path = dir.path() / "s.sock";
  boost::asio::io_context io;
  auto first = Listener::Open(io.get_executor(), Options(path));
  ASSERT_TRUE(first.ok());
  // Someone removed our file and a new daemon bound the path.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  auto second = Listener::Open(io.get_executor(), Options(path));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  (*first)->Close();
  EXPECT_TRUE(std::filesystem::is_socket(path));
  EXPECT_TRUE(RawClient(path.string()).connected());
  (*second)->Close();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ListenerTest, RefusesATooLongPath) {
  boost::asio::io_context io;
  auto listener = Listener::Open(io.get_executor(), Options("/tmp/" + std::string(200, 'x')));
  ASSERT_FALSE(listener.ok());
  EXPECT_EQ(listener.status().code(), common::StatusCode::kInvalidArgument);
}

TEST(ListenerTest, PeerUidIsTheConnectingProcessUid) {
  ScopedTempDir dir;
  auto path = dir.path() / "p.sock";
  boost::asio::io_context io;
  auto listener = Listener::Open(io.get_executor(), Options(path));
  ASSERT_TRUE(listener.ok());
  RawClient client(path.string());
  ASSERT_TRUE(client.connected());
  Listener::Socket socket(io);
  (*listener)->acceptor().accept(socket);
  auto uid = Listener::PeerUid(socket);
  ASSERT_TRUE(uid.ok());
  EXPECT_EQ(*uid, ::getuid());
}

}  // namespace
}  // namespace niels::daemon::server::testing
