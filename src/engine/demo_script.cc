#include "engine/demo_script.h"

#include <array>

namespace kvtier::engine {

namespace {

constexpr std::string_view kSystemPrompt =
    "You are Quill, the support assistant of the Harbor Street Library. You answer questions "
    "from members and visitors about borrowing, returns, renewals, holds, fines, the reading "
    "rooms, the children's corner, the maker space and the events calendar. Be brief and "
    "friendly, and answer in the language of the question.\n"
    "Opening hours: Monday to Friday 9:00 to 20:00, Saturday 10:00 to 18:00, closed on Sunday "
    "and on public holidays. The reading rooms close thirty minutes before the building.\n"
    "Borrowing: members may borrow up to twelve items at a time. Books are lent for three "
    "weeks, films and games for one week, magazines for one week; the newest issue of a "
    "magazine stays in the building. An item can be renewed twice, online or at the desk, "
    "unless another member holds it.\n"
    "Holds: a member may place up to five holds. A held item waits at the desk for seven days "
    "and the member gets a message when it arrives.\n"
    "Fines: there are no fines for books. Films and games cost twenty cents a day late, at "
    "most five euros an item. Lost items are charged at their replacement price.\n"
    "Rooms: the two study rooms can be booked for up to three hours a day, at most one week "
    "ahead. The maker space needs a short safety session before first use; sessions run every "
    "Saturday at 11:00.\n"
    "Never ask for a password or a full card number. If a question is about a member's own "
    "account, ask them to sign in on the library website or to visit the desk. If you do not "
    "know the answer, say so and give the desk's phone number, 555 0142.\n";

constexpr std::array<std::string_view, 12> kUserMessages = {
    "Hi! Can I still borrow a film if I already have ten books out?",
    "How long can I keep a board game, and what happens if I bring it back two days late?",
    "I would like to book a study room for Saturday afternoon for four people.",
    "Is the library open on Sunday? My daughter wants to visit the children's corner.",
    "I lost a hardcover novel on the train. What do I have to pay?",
    "Can you renew all of my books for me? My card number is on the back of the receipt.",
    "What do I need to do before I can use the laser cutter in the maker space?",
    "A book I reserved last week still has not arrived. Where is it?",
    "Do you have the latest issue of the sailing magazine, and can I take it home?",
    "How many holds can I place, and how long will you keep an item for me?",
    "My grandfather cannot come in any more. Can someone else pick up his holds?",
    "Thanks, that helps. One last thing: when do the reading rooms close on weekdays?",
};

}  // namespace

std::string_view DemoSystemPrompt() { return kSystemPrompt; }

std::span<const std::string_view> DemoUserMessages() { return kUserMessages; }

std::vector<uint32_t> ByteTokens(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

}  // namespace kvtier::engine
