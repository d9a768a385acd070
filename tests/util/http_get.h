// A minimal HTTP client for the tests of the HTTP endpoints (/metrics,
// /healthz, the inference server).
#ifndef SHADOWSYNC_TESTS_UTIL_HTTP_GET_H_
#define SHADOWSYNC_TESTS_UTIL_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace shadowsync::testing {

// A TCP connection to `host` (an IPv4 address):`port` whose connect, reads
// and writes give up after `timeout_seconds`; -1 if it cannot connect.
inline int ConnectTcp(const std::string& host, int port, int timeout_seconds) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  timeval timeout{.tv_sec = timeout_seconds, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  // Bounds connect() too (Linux): an address nobody holds yet, such as a
  // container still starting, would otherwise hang for the ARP timeout.
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` (raw HTTP) to `host` (an IPv4 address):`port` and returns
// everything the server sends until it closes the connection: "" if it
// cannot connect, or nothing arrives within `timeout_seconds` of the connect
// or of a read.
inline std::string HttpExchange(const std::string& host, int port, const std::string& request,
                                int timeout_seconds = 5) {
  const int fd = ConnectTcp(host, port, timeout_seconds);
  if (fd < 0) return "";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  return response;
}

// The status code of an HTTP response (-1 if it is none), its body into `body`.
inline int HttpStatus(const std::string& response, std::string* body) {
  if (response.compare(0, 9, "HTTP/1.1 ") != 0 && response.compare(0, 9, "HTTP/1.0 ") != 0) {
    return -1;
  }
  const size_t header_end = response.find("\r\n\r\n");
  *body = header_end == std::string::npos ? "" : response.substr(header_end + 4);
  return std::stoi(response.substr(9, 3));
}

// GET `path` from `host` (an IPv4 address):`port`; returns the status code
// (-1 if there is no HTTP answer, or none within `timeout_seconds` of the
// connect or of a read) and fills `body`.
inline int HttpGet(const std::string& host, int port, const std::string& path, std::string* body,
                   int timeout_seconds = 5) {
  return HttpStatus(
      HttpExchange(host, port, "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n",
                   timeout_seconds),
      body);
}

// POST `content` (JSON) to `path` on 127.0.0.1:`port`, as HttpGet.
inline int HttpPost(int port, const std::string& path, const std::string& content,
                    std::string* body, int timeout_seconds = 10) {
  return HttpStatus(HttpExchange("127.0.0.1", port,
                                 "POST " + path +
                                     " HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: "
                                     "application/json\r\nContent-Length: " +
                                     std::to_string(content.size()) + "\r\n\r\n" + content,
                                 timeout_seconds),
                    body);
}

// The same from 127.0.0.1.
inline int HttpGet(int port, const std::string& path, std::string* body) {
  return HttpGet("127.0.0.1", port, path, body);
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_HTTP_GET_H_
