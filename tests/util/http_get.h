// A minimal HTTP/1.0 GET for the tests of /metrics and /healthz endpoints.
#ifndef SHADOWSYNC_TESTS_UTIL_HTTP_GET_H_
#define SHADOWSYNC_TESTS_UTIL_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace shadowsync::testing {

// GET `path` from 127.0.0.1:`port`; returns the status code (-1 if there is
// no HTTP answer) and fills `body`.
inline int HttpGet(int port, const std::string& path, std::string* body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  if (response.compare(0, 9, "HTTP/1.1 ") != 0 && response.compare(0, 9, "HTTP/1.0 ") != 0) {
    return -1;
  }
  const size_t header_end = response.find("\r\n\r\n");
  *body = header_end == std::string::npos ? "" : response.substr(header_end + 4);
  return std::stoi(response.substr(9, 3));
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_HTTP_GET_H_
