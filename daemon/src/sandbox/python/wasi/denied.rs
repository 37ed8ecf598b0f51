//! The part of the Python guest's WASI imports that only ever refuses: sockets (a network
//! capability exists, but no socket can be created and no name resolved). Resources the guest
//! can never obtain have the uninhabited type [`Never`] as their representation, so their
//! methods cannot be reached.

use hyperlight_common::component::Negative as N;
use hyperlight_common::resource::BorrowedResourceGuard as B;

use super::{Network, Never, WasiHost};
use crate::sandbox::python::bindings::wasi::sockets;

use sockets::network::ErrorCode as NetError;

// --- wasi:sockets: a network capability exists, but no socket can be made ---------------

impl sockets::network::Network<N> for WasiHost {
    type T = Network;
}
impl sockets::Network<N> for WasiHost {}
impl sockets::InstanceNetwork<N, Network> for WasiHost {
    fn instance_network(&mut self) -> Network {
        self.call.resource_given();
        Network
    }
}
impl<A, P> sockets::IpNameLookup<N, NetError, A, Network, P> for WasiHost {
    fn resolve_addresses(
        &mut self,
        _network: B<'_, Network>,
        _name: String,
    ) -> Result<Never, NetError> {
        Err(NetError::AccessDenied)
    }
}
impl<D, I, S, O, P> sockets::Tcp<N, D, NetError, I, S, Network, O, P> for WasiHost {}
impl<F> sockets::TcpCreateSocket<N, NetError, F, Never> for WasiHost {
    fn create_tcp_socket(&mut self, _family: F) -> Result<Never, NetError> {
        Err(NetError::AccessDenied)
    }
}
impl<S, P> sockets::Udp<N, NetError, S, Network, P> for WasiHost {}
impl<F> sockets::UdpCreateSocket<N, NetError, F, Never> for WasiHost {
    fn create_udp_socket(&mut self, _family: F) -> Result<Never, NetError> {
        Err(NetError::AccessDenied)
    }
}

/// The methods of a resource the guest can never hold: each takes the resource (`self_`, of
/// the uninhabited [`Never`]) and the arguments listed, and its body cannot be reached.
macro_rules! unreachable_methods {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(fn $name(&mut self, self_: B<'_, Never>, $($arg: $ty),*) -> $ret {
            match *self_ {}
        })*
    };
}

/// What a TCP socket's methods answer: a value, or the interface's error code.
type Tcp<T, E> = Result<T, sockets::tcp::ErrorCode<E>>;
/// What a UDP socket's methods answer.
type Udp<T, E> = Result<T, sockets::udp::ErrorCode<E>>;
type TcpAddress<A> = sockets::tcp::IpSocketAddress<A>;
type UdpAddress<A> = sockets::udp::IpSocketAddress<A>;
type TcpDuration<D> = sockets::tcp::Duration<D>;

impl<Duration, ErrorCode, InputStream, IpSocketAddress, Network, OutputStream, Pollable>
    sockets::tcp::TcpSocket<
        N,
        Duration,
        ErrorCode,
        InputStream,
        IpSocketAddress,
        Network,
        OutputStream,
        Pollable,
    > for WasiHost
{
    type T = Never;
    unreachable_methods! {
        fn start_bind(_network: B<'_, sockets::tcp::Network<Network>>, _local: TcpAddress<IpSocketAddress>) -> Tcp<(), ErrorCode>;
        fn finish_bind() -> Tcp<(), ErrorCode>;
        fn start_connect(_network: B<'_, sockets::tcp::Network<Network>>, _remote: TcpAddress<IpSocketAddress>) -> Tcp<(), ErrorCode>;
        fn finish_connect() -> Tcp<(sockets::tcp::InputStream<InputStream>, sockets::tcp::OutputStream<OutputStream>), ErrorCode>;
        fn start_listen() -> Tcp<(), ErrorCode>;
        fn finish_listen() -> Tcp<(), ErrorCode>;
        fn accept() -> Tcp<(Never, sockets::tcp::InputStream<InputStream>, sockets::tcp::OutputStream<OutputStream>), ErrorCode>;
        fn local_address() -> Tcp<TcpAddress<IpSocketAddress>, ErrorCode>;
        fn remote_address() -> Tcp<TcpAddress<IpSocketAddress>, ErrorCode>;
        fn is_listening() -> bool;
        fn set_listen_backlog_size(_value: u64) -> Tcp<(), ErrorCode>;
        fn keep_alive_enabled() -> Tcp<bool, ErrorCode>;
        fn set_keep_alive_enabled(_value: bool) -> Tcp<(), ErrorCode>;
        fn keep_alive_idle_time() -> Tcp<TcpDuration<Duration>, ErrorCode>;
        fn set_keep_alive_idle_time(_value: TcpDuration<Duration>) -> Tcp<(), ErrorCode>;
        fn keep_alive_interval() -> Tcp<TcpDuration<Duration>, ErrorCode>;
        fn set_keep_alive_interval(_value: TcpDuration<Duration>) -> Tcp<(), ErrorCode>;
        fn keep_alive_count() -> Tcp<u32, ErrorCode>;
        fn set_keep_alive_count(_value: u32) -> Tcp<(), ErrorCode>;
        fn hop_limit() -> Tcp<u8, ErrorCode>;
        fn set_hop_limit(_value: u8) -> Tcp<(), ErrorCode>;
        fn receive_buffer_size() -> Tcp<u64, ErrorCode>;
        fn set_receive_buffer_size(_value: u64) -> Tcp<(), ErrorCode>;
        fn send_buffer_size() -> Tcp<u64, ErrorCode>;
        fn set_send_buffer_size(_value: u64) -> Tcp<(), ErrorCode>;
        fn subscribe() -> sockets::tcp::Pollable<Pollable>;
        fn shutdown(_how: sockets::tcp::ShutdownType) -> Tcp<(), ErrorCode>;
    }
}

impl<ErrorCode, IncomingDatagramStream, IpSocketAddress, Network, OutgoingDatagramStream, Pollable>
    sockets::udp::UdpSocket<
        N,
        ErrorCode,
        IncomingDatagramStream,
        IpSocketAddress,
        Network,
        OutgoingDatagramStream,
        Pollable,
    > for WasiHost
{
    type T = Never;
    unreachable_methods! {
        fn start_bind(_network: B<'_, sockets::udp::Network<Network>>, _local: UdpAddress<IpSocketAddress>) -> Udp<(), ErrorCode>;
        fn finish_bind() -> Udp<(), ErrorCode>;
        fn stream(_remote: Option<UdpAddress<IpSocketAddress>>) -> Udp<(IncomingDatagramStream, OutgoingDatagramStream), ErrorCode>;
        fn local_address() -> Udp<UdpAddress<IpSocketAddress>, ErrorCode>;
        fn remote_address() -> Udp<UdpAddress<IpSocketAddress>, ErrorCode>;
        fn unicast_hop_limit() -> Udp<u8, ErrorCode>;
        fn set_unicast_hop_limit(_value: u8) -> Udp<(), ErrorCode>;
        fn receive_buffer_size() -> Udp<u64, ErrorCode>;
        fn set_receive_buffer_size(_value: u64) -> Udp<(), ErrorCode>;
        fn send_buffer_size() -> Udp<u64, ErrorCode>;
        fn set_send_buffer_size(_value: u64) -> Udp<(), ErrorCode>;
        fn subscribe() -> sockets::udp::Pollable<Pollable>;
    }
}

impl<ErrorCode, IpSocketAddress, Pollable>
    sockets::udp::IncomingDatagramStream<N, ErrorCode, IpSocketAddress, Pollable> for WasiHost
{
    type T = Never;
    unreachable_methods! {
        fn receive(_max_results: u64) -> Udp<Vec<sockets::udp::IncomingDatagram<IpSocketAddress>>, ErrorCode>;
        fn subscribe() -> sockets::udp::Pollable<Pollable>;
    }
}

impl<ErrorCode, IpSocketAddress, Pollable>
    sockets::udp::OutgoingDatagramStream<N, ErrorCode, IpSocketAddress, Pollable> for WasiHost
{
    type T = Never;
    unreachable_methods! {
        fn check_send() -> Udp<u64, ErrorCode>;
        fn send(_datagrams: Vec<sockets::udp::OutgoingDatagram<IpSocketAddress>>) -> Udp<u64, ErrorCode>;
        fn subscribe() -> sockets::udp::Pollable<Pollable>;
    }
}

impl<ErrorCode, IpAddress, Pollable>
    sockets::ip_name_lookup::ResolveAddressStream<N, ErrorCode, IpAddress, Pollable> for WasiHost
{
    type T = Never;
    unreachable_methods! {
        fn resolve_next_address() -> Result<Option<sockets::ip_name_lookup::IpAddress<IpAddress>>, sockets::ip_name_lookup::ErrorCode<ErrorCode>>;
        fn subscribe() -> sockets::ip_name_lookup::Pollable<Pollable>;
    }
}
